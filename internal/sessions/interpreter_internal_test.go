package sessions

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// split feeds s to a splitter in chunks cut at cuts and returns the output
// (joined) and the markers.
func split(s string, limit int, cuts []int) (string, []string) {
	d := &markerSplitter{open: []byte("\x1etok:"), limit: limit}
	var out strings.Builder
	var marks []string
	prev := 0
	for _, c := range append(cuts, len(s)) {
		c = min(max(c, prev), len(s))
		d.feed([]byte(s[prev:c]), func(b []byte) {
			if !utf8.Valid(b) && utf8.ValidString(s) {
				panic("split a rune")
			}
			out.Write(b)
		}, func(m string) { marks = append(marks, m) })
		prev = c
	}
	out.Write(d.buf) // what is held at the end
	return out.String(), marks
}

func TestMarkerSplitter(t *testing.T) {
	for _, tc := range []struct {
		name, in, out string
		marks         []string
	}{
		{"plain", "hello", "hello", nil},
		{"marker", "a\x1etok:Dcompleted\x1eb", "ab", []string{"Dcompleted"}},
		{"two", "\x1etok:E{}\x1e\x1etok:Dx\x1e", "", []string{"E{}", "Dx"}},
		{"other token is output", "\x1eother:D\x1e", "\x1eother:D\x1e", nil},
		{"unclosed past the limit is output", "\x1etok:" + strings.Repeat("z", 20) + "\x1etok:Dy\x1e", "\x1etok:" + strings.Repeat("z", 20), []string{"Dy"}},
		{"euro", "€", "€", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for cut := 0; cut <= len(tc.in); cut++ { // every two-chunk split
				out, marks := split(tc.in, 12, []int{cut})
				if out != tc.out || !cmp.Equal(marks, tc.marks) {
					t.Errorf("cut at %d: out %q marks %q, want %q %q", cut, out, marks, tc.out, tc.marks)
				}
			}
		})
	}
}

// However the stream is chunked, the splitter finds the same output and
// markers, and never hands out part of a rune.
func FuzzMarkerSplitter(f *testing.F) {
	f.Add("a\x1etok:Dok\x1eé€b", 3, 7)
	f.Add("\x1etok:\x1etok:E\x1e", 1, 2)
	f.Fuzz(func(t *testing.T, s string, c1, c2 int) {
		wantOut, wantMarks := split(s, 16, nil)
		out, marks := split(s, 16, []int{c1 % (len(s) + 1), c2 % (len(s) + 1)})
		if c1 >= 0 && c2 >= 0 && (out != wantOut || !cmp.Equal(marks, wantMarks)) {
			t.Errorf("chunked %q at %d,%d: %q %q, whole: %q %q", s, c1, c2, out, marks, wantOut, wantMarks)
		}
	})
}
