package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// envelopes frames each size as a Connect message of that many bytes.
func envelopes(sizes ...uint32) []byte {
	var b bytes.Buffer
	for _, n := range sizes {
		var prefix [5]byte
		binary.BigEndian.PutUint32(prefix[1:], n)
		b.Write(prefix[:])
		b.Write(make([]byte, n))
	}
	return b.Bytes()
}

// oneByte reads one byte at a time, so that prefixes arrive split.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:min(len(p), 1)]) }

func TestEnvelopeLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream []byte
		split  bool
		wantOK bool
	}{
		{"UnderTheBound", envelopes(0, 10, 50, 0), false, true},
		{"UnderTheBoundSplit", envelopes(3, 0, 7), true, true},
		{"AtTheBound", envelopes(64), false, true},
		{"OverTheBound", envelopes(10, 65), false, false},
		{"OverTheBoundSplit", envelopes(1, 65), true, false},
		{"AnnouncedNeverSent", envelopes(0)[:0:0], false, true},
		{"FourGiBAnnounced", append(envelopes(1), 0, 0xff, 0xff, 0xff, 0xff, 'a'), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r io.Reader = bytes.NewReader(tc.stream)
			if tc.split {
				r = oneByte{r}
			}
			e := &envelopeLimit{body: io.NopCloser(r), max: 64}
			_, err := io.ReadAll(e)
			if gotOK := err == nil; gotOK != tc.wantOK {
				t.Errorf("read: %v, want ok=%v", err, tc.wantOK)
			}
			if err != nil && !errors.Is(err, ErrReplyTooLarge) {
				t.Errorf("error %v is not ErrReplyTooLarge", err)
			}
		})
	}
}

func TestBodyLimit(t *testing.T) {
	for _, tc := range []struct {
		size   int
		wantOK bool
	}{{0, true}, {64, true}, {65, false}, {1 << 20, false}} {
		b := &bodyLimit{body: io.NopCloser(bytes.NewReader(make([]byte, tc.size))), left: 64}
		got, err := io.ReadAll(b)
		if gotOK := err == nil; gotOK != tc.wantOK || (gotOK && len(got) != tc.size) {
			t.Errorf("%d bytes: read %d, %v; want ok=%v", tc.size, len(got), err, tc.wantOK)
		}
		if err != nil && !errors.Is(err, ErrReplyTooLarge) {
			t.Errorf("%d bytes: error %v is not ErrReplyTooLarge", tc.size, err)
		}
	}
}
