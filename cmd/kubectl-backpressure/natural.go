package main

import (
	"cmp"
	"strings"
)

// naturalCompare orders names as people count: a run of digits compares
// by its value, so that a StatefulSet's search-gateway-2 comes before
// search-gateway-10, which a byte order puts first. Runs of equal value
// but different length (07 and 7) fall back to the byte order, so the
// order stays total.
func naturalCompare(a, b string) int {
	x, y := a, b
	for x != "" && y != "" {
		if isDigit(x[0]) && isDigit(y[0]) {
			dx, dy := digitRun(x), digitRun(y)
			nx, ny := strings.TrimLeft(x[:dx], "0"), strings.TrimLeft(y[:dy], "0")
			if c := cmp.Or(cmp.Compare(len(nx), len(ny)), strings.Compare(nx, ny)); c != 0 {
				return c
			}
			x, y = x[dx:], y[dy:]
			continue
		}
		if x[0] != y[0] {
			return cmp.Compare(x[0], y[0])
		}
		x, y = x[1:], y[1:]
	}
	return cmp.Or(cmp.Compare(len(x), len(y)), strings.Compare(a, b))
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// digitRun returns the length of the run of digits s starts with.
func digitRun(s string) int {
	n := 0
	for n < len(s) && isDigit(s[n]) {
		n++
	}
	return n
}
