// Command protoc generates the Go code of the project's .proto files
// without a protoc binary: protocompile (bufbuild/protocompile, the
// compiler inside buf) parses them, and the protoc-gen-go and
// protoc-gen-go-grpc plugins this module pins turn them into Go, each run
// as protoc would run it (a CodeGeneratorRequest on its stdin). A fresh
// machine needs nothing but the go command; buf itself would bring about a
// hundred modules for the same two files.
//
// From the repository root (make proto):
//
//	go -C hack/tools/protoc run . -root ../../.. NAME=PATH...
//
// NAME is a file's name in the protobuf registry, which is also how other
// .proto files import it (backpressure/reserve/v1/reserve.proto); PATH is
// where it lies under -root. The generated files are written beside PATH,
// so that NAME stays the same wherever the file moves.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/pluginpb"
)

// plugins are run in order on every file, with their parameters.
var plugins = []struct{ name, parameter string }{
	{"protoc-gen-go", "paths=source_relative"},
	{"protoc-gen-go-grpc", "paths=source_relative"},
}

func main() {
	root := flag.String("root", ".", "directory the PATHs are relative to")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: protoc [-root DIR] NAME=PATH...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(context.Background(), *root, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "protoc:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, root string, args []string) error {
	if len(args) == 0 {
		return errors.New("no NAME=PATH given")
	}
	sources := map[string]string{}
	var names []string
	for _, arg := range args {
		name, file, ok := strings.Cut(arg, "=")
		if !ok || name == "" || file == "" {
			return fmt.Errorf("%q: want NAME=PATH", arg)
		}
		sources[name] = filepath.Join(root, file)
		names = append(names, name)
	}
	compiler := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: func(name string) (io.ReadCloser, error) {
				file, ok := sources[name]
				if !ok {
					return nil, fmt.Errorf("%s: %w (give it as NAME=PATH)", name, os.ErrNotExist)
				}
				return os.Open(file)
			},
		}),
		// The plugins copy the .proto's comments into the Go code.
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	files, err := compiler.Compile(ctx, names...)
	if err != nil {
		return err
	}
	req := &pluginpb.CodeGeneratorRequest{FileToGenerate: names}
	seen := map[string]bool{}
	for _, f := range files {
		addWithImports(req, f, seen)
	}
	for _, p := range plugins {
		req.Parameter = proto.String(p.parameter)
		if err := generate(ctx, p.name, req, sources); err != nil {
			return err
		}
	}
	return nil
}

// addWithImports appends f to the request after the files it imports, as
// protoc orders them.
func addWithImports(req *pluginpb.CodeGeneratorRequest, f protoreflect.FileDescriptor, seen map[string]bool) {
	if seen[f.Path()] {
		return
	}
	seen[f.Path()] = true
	imports := f.Imports()
	for i := range imports.Len() {
		addWithImports(req, imports.Get(i).FileDescriptor, seen)
	}
	req.ProtoFile = append(req.ProtoFile, protodesc.ToFileDescriptorProto(f))
}

// generate runs one plugin through `go tool`, at this module's version, and
// writes what it generates beside the .proto file it came from.
func generate(ctx context.Context, plugin string, req *pluginpb.CodeGeneratorRequest, sources map[string]string) error {
	in, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "tool", plugin)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &out, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", plugin, err, stderr.Bytes())
	}
	var resp pluginpb.CodeGeneratorResponse
	if err := proto.Unmarshal(out.Bytes(), &resp); err != nil {
		return fmt.Errorf("%s: reading its answer: %w", plugin, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("%s: %s", plugin, resp.GetError())
	}
	dirs := map[string]string{} // a NAME's directory → its PATH's
	for name, file := range sources {
		dirs[path.Dir(name)] = filepath.Dir(file)
	}
	for _, f := range resp.File {
		dir, ok := dirs[path.Dir(f.GetName())]
		if !ok || f.InsertionPoint != nil {
			return fmt.Errorf("%s: generated %q, which lies beside no .proto given", plugin, f.GetName())
		}
		target := filepath.Join(dir, path.Base(f.GetName()))
		if err := os.WriteFile(target, []byte(f.GetContent()), 0o644); err != nil {
			return err
		}
	}
	return nil
}
