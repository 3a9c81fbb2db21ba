package division

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// FuzzFairShare checks FairShare's guarantees on arbitrary claims: a panic
// with the package prefix on a negative total, and otherwise every invariant
// of checkFairShare, exactly one claim raised by one at total+1, the same
// result for the claims in reverse order when Names are distinct, and, when
// the total is small enough, the unit-by-unit reference.
//
// Each claim takes 5 bytes of data: a byte of flags and Name, two of Weight,
// two of Demand (see decodeClaims).
func FuzzFairShare(f *testing.F) {
	f.Add(int64(10), []byte{0, 0, 1, 0, 2, 1, 0, 1, 0, 0, 2, 0, 1, 0, 0})
	f.Add(int64(11), []byte{0x40, 0, 5, 0, 0, 0x41, 0, 5, 0, 0, 0x42, 0, 1, 0, 0}) // 6, 6, 2 unbounded
	f.Add(int64(100), []byte{0, 0, 0, 0, 3, 1, 0, 1, 0, 4})                        // surplus
	f.Add(int64(math.MaxInt64), []byte{0xc0, 0, 0, 0, 0, 0x81, 0, 1, 0, 0})
	f.Add(int64(1<<40), []byte{0xa0, 0, 0, 0x12, 0x34, 0x21, 0, 9, 0xff, 0xff, 0x42, 0, 0, 0, 0})
	f.Add(int64(-1), []byte{0, 0, 0, 0, 0})
	f.Add(int64(0), []byte{})

	f.Fuzz(func(t *testing.T, total int64, data []byte) {
		claims := decodeClaims(data)
		if total < 0 {
			if msg := panicMessage(func() { FairShare(total, claims) }); !strings.HasPrefix(msg, "division: ") {
				t.Fatalf("FairShare(%d, %v) panicked with %q, want a message starting \"division: \"", total, claims, msg)
			}
			return
		}
		got := FairShare(total, claims)
		for _, e := range checkFairShare(total, claims, got) {
			t.Errorf("FairShare(%d, %v) = %v: %s", total, claims, got, e)
		}
		if e := checkMonotone(total, claims, got); e != "" {
			t.Error(e)
		}
		perm := make([]int, len(claims))
		for i := range perm {
			perm[i] = len(perm) - 1 - i
		}
		if e := checkPermuted(total, claims, got, perm); e != "" {
			t.Error(e)
		}
		if total <= 5000 && len(claims) <= 16 {
			if want := reference(total, claims); !slices.Equal(want, got) {
				t.Errorf("FairShare(%d, %v) = %v, the unit-by-unit reference gives %v", total, claims, got, want)
			}
		}
	})
}

// decodeClaims reads up to 64 claims of 5 bytes each. In the first byte, the
// low 3 bits pick the Name from 8 (so Names repeat), bit 7 takes the Weight
// from the top of the range (MaxWeight minus the next two bytes) rather than
// 1 to 1000, bit 6 makes the Demand Unbounded, and bit 5 shifts the Demand's
// two bytes up by 47 bits rather than keeping them below 200.
func decodeClaims(data []byte) []Claim {
	var claims []Claim
	for len(data) >= 5 && len(claims) < 64 {
		flags := data[0]
		w := int64(data[1])<<8 | int64(data[2])
		d := int64(data[3])<<8 | int64(data[4])
		data = data[5:]
		c := Claim{Name: string(rune('a' + flags&7))}
		if flags&0x80 != 0 {
			c.Weight = MaxWeight - w
		} else {
			c.Weight = 1 + w%1000
		}
		switch {
		case flags&0x40 != 0:
			c.Demand = Unbounded
		case flags&0x20 != 0:
			c.Demand = d << 47
		default:
			c.Demand = d % 200
		}
		claims = append(claims, c)
	}
	return claims
}
