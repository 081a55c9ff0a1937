package daytona

import "testing"

// TestImage_BaseIsTheDaemonDefault: snapshot `base` and no snapshot leave
// the image empty, so the service fills in the daemon's configured
// default image; any other snapshot names an image.
func TestImage_BaseIsTheDaemonDefault(t *testing.T) {
	f := New(Options{})
	defer f.Close()
	for snapshot, want := range map[string]string{
		"":         "",
		"base":     "",
		"alpine:3": "alpine:3",
	} {
		got, err := f.image(createBody{Snapshot: snapshot})
		if err != nil {
			t.Fatalf("image(%q): %v", snapshot, err)
		}
		if got != want {
			t.Errorf("snapshot %q: image = %q, want %q", snapshot, got, want)
		}
	}
}
