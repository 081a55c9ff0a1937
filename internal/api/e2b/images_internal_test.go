package e2b

import "testing"

// TestCreateRequest_BaseIsTheDaemonDefault: template `base` (and no
// template) leaves the image empty, so the service fills in the daemon's
// configured default image; other templates keep their images.
func TestCreateRequest_BaseIsTheDaemonDefault(t *testing.T) {
	f := New(Options{Service: noNetwork{}, AccessTokenKey: []byte("k")})
	for template, want := range map[string]string{
		"":                      "",
		"base":                  "",
		codeInterpreterTemplate: "sandboxd/code-interpreter:v1",
		"alpine:3":              "alpine:3",
	} {
		req, err := f.createRequest("o", newSandboxBody{TemplateID: template}, nil)
		if err != nil {
			t.Fatalf("createRequest(%q): %v", template, err)
		}
		if req.Image != want {
			t.Errorf("template %q: image = %q, want %q", template, req.Image, want)
		}
	}
}

// noNetwork is a Service of a daemon without --sandbox-network; every
// other method is nil's (createRequest calls none).
type noNetwork struct{ Service }

func (noNetwork) NetworkAllowed() bool { return false }
