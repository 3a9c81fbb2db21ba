package hygiene

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxSize is the largest tracked file that is not an image.
const maxSize = 1 << 20

// headLen is how much of a file the checks read: enough for
// http.DetectContentType and for a PE header's offset.
const headLen = 512

// executable returns the executable format whose magic head starts with,
// or "" for none.
func executable(head []byte) string {
	switch {
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return "ELF"
	case len(head) >= 4 && isMachO(binary.BigEndian.Uint32(head)):
		return "Mach-O"
	case isPE(head):
		return "PE"
	}
	return ""
}

// isMachO reports whether magic, read big-endian, is a Mach-O magic in
// either byte order, or a universal ("fat") binary's.
func isMachO(magic uint32) bool {
	switch magic {
	case 0xfeedface, 0xfeedfacf, 0xcefaedfe, 0xcffaedfe, 0xcafebabe, 0xbebafeca:
		return true
	}
	return false
}

// isPE reports whether head is a PE image: an MZ stub whose header offset,
// at 0x3c, points at the "PE\0\0" signature.
func isPE(head []byte) bool {
	if len(head) < 0x40 || !bytes.HasPrefix(head, []byte("MZ")) {
		return false
	}
	off := binary.LittleEndian.Uint32(head[0x3c:])
	return uint64(off)+4 <= uint64(len(head)) && bytes.Equal(head[off:off+4], []byte("PE\x00\x00"))
}

// isImage reports whether a file named name with content head is an image:
// sniffed as image/* (PNG, JPEG, GIF, WebP, ...), or an SVG by its name,
// since SVG is XML text to the sniffer.
func isImage(name string, head []byte) bool {
	return strings.HasPrefix(http.DetectContentType(head), "image/") || strings.EqualFold(filepath.Ext(name), ".svg")
}

// problem returns what is wrong with a tracked file named name, of size
// bytes, whose content starts with head; "" when nothing is.
func problem(name string, size int64, head []byte) string {
	if format := executable(head); format != "" {
		return "is a built binary (" + format + ")"
	}
	if size > maxSize && !isImage(name, head) {
		return "is over 1 MiB and not an image"
	}
	return ""
}

// tracked returns the repository's root and the files git tracks there,
// or skips the test outside a git checkout.
func tracked(t *testing.T) (string, []string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("hygiene: no git on PATH, so no list of tracked files to check")
	}
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("hygiene: not in a git checkout (git rev-parse: %v), so no list of tracked files to check", err)
	}
	root := strings.TrimSpace(string(out))
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	list, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	return root, strings.Split(strings.TrimSuffix(string(list), "\x00"), "\x00")
}

// TestNoBinariesOrLargeFilesTracked fails on any tracked executable and any
// tracked file over 1 MiB that is not an image, naming each.
func TestNoBinariesOrLargeFilesTracked(t *testing.T) {
	root, files := tracked(t)
	if len(files) < 10 {
		t.Fatalf("git ls-files listed %d files in %s; want the repository's", len(files), root)
	}
	for _, name := range files {
		head, size, err := readHead(filepath.Join(root, filepath.FromSlash(name)))
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue // deleted in the working tree, not yet in the index
		case err != nil:
			t.Errorf("%s: %v", name, err)
		default:
			if p := problem(name, size, head); p != "" {
				t.Errorf("%s (%d bytes) %s: remove it (git rm --cached) and keep it out with .gitignore", name, size, p)
			}
		}
	}
}

// readHead returns the first headLen bytes of the file at path and its
// size. A symbolic link is read as the link's text, as git stores it.
func readHead(path string) ([]byte, int64, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, 0, err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(path)
		return []byte(target), int64(len(target)), err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, nil // a submodule's directory
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	head := make([]byte, headLen)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, 0, err
	}
	return head[:n], fi.Size(), nil
}

// TestProblem checks the classification on the heads of real formats:
// the binaries it must catch, and what it must let through.
func TestProblem(t *testing.T) {
	pe := make([]byte, 0x100)
	copy(pe, "MZ")
	binary.LittleEndian.PutUint32(pe[0x3c:], 0x80)
	copy(pe[0x80:], "PE\x00\x00")
	mzOnly := bytes.Clone(pe)
	copy(mzOnly[0x80:], "NE\x00\x00")
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	text := []byte("package main\n")
	for _, tt := range []struct {
		name string
		size int64
		head []byte
		want string
	}{
		{"gateway", 42504803, []byte("\x7fELF\x02\x01\x01\x00"), "is a built binary (ELF)"},
		{"tiny.so", 300, []byte("\x7fELF\x02\x01\x01\x00"), "is a built binary (ELF)"},
		{"manager", 5 << 20, []byte{0xcf, 0xfa, 0xed, 0xfe, 0x0c, 0x00, 0x00, 0x01}, "is a built binary (Mach-O)"},
		{"universal", 5 << 20, []byte{0xca, 0xfe, 0xba, 0xbe, 0x00, 0x00, 0x00, 0x02}, "is a built binary (Mach-O)"},
		{"proxy.exe", 5 << 20, pe, "is a built binary (PE)"},
		{"README.md", 71616, text, ""},
		{"pod.log", 2 << 20, text, "is over 1 MiB and not an image"},
		{"docs/images/storm.png", 2 << 20, png, ""},
		{"docs/images/flow.svg", 2 << 20, []byte("<svg xmlns=\"http://www.w3.org/2000/svg\">"), ""},
		{"stub.txt", 100, mzOnly, ""},
		{"empty", 0, nil, ""},
		{"exactly 1 MiB", maxSize, text, ""},
	} {
		if got := problem(tt.name, tt.size, tt.head); got != tt.want {
			t.Errorf("problem(%s, %d bytes) = %q, want %q", tt.name, tt.size, got, tt.want)
		}
	}
}
