// Package hygiene tests what the repository tracks: no built binary (ELF,
// Mach-O or PE, whatever its name) and no file over 1 MiB other than an
// image. A binary committed by accident makes every clone heavier for good;
// .gitignore keeps the usual ones out, and this test catches the others
// before they land.
//
// It reads the list of tracked files from `git ls-files` and skips, saying
// why, outside a git checkout or without git.
package hygiene
