package auth_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sandboxd/sandboxd/internal/auth"
)

var (
	tokenRE  = regexp.MustCompile(`^sbx_[0-9a-f]{8}_[0-9a-f]{64}$`)
	e2bKeyRE = regexp.MustCompile(`^e2b_[0-9a-f]+$`) // what the E2B Python SDK checks
)

func TestGenerate_RoundTrip(t *testing.T) {
	plaintext, tok, hash := auth.Generate(auth.RoleUser, "team-a")
	if !tokenRE.MatchString(plaintext) {
		t.Fatalf("token %q does not match %s", plaintext, tokenRE)
	}
	want := auth.Token{ID: plaintext[4:12], Role: auth.RoleUser, Owner: "team-a"}
	if diff := cmp.Diff(want, tok); diff != "" {
		t.Errorf("Token (-want +got):\n%s", diff)
	}
	if hash != auth.Hash(plaintext) {
		t.Error("returned hash != Hash(plaintext)")
	}
	id, err := auth.Parse(plaintext)
	if err != nil || id != tok.ID {
		t.Errorf("Parse = %q, %v; want %q", id, err, tok.ID)
	}
}

func TestGenerate_Unique(t *testing.T) {
	a, ta, ha := auth.Generate(auth.RoleAdmin, "")
	b, tb, hb := auth.Generate(auth.RoleAdmin, "")
	if a == b || ta.ID == tb.ID || ha == hb {
		t.Errorf("two tokens share a value: %s/%s", ta.ID, tb.ID)
	}
}

func TestHash_CoversWholeToken(t *testing.T) {
	plaintext, _, _ := auth.Generate(auth.RoleUser, "o")
	otherID := "sbx_00000000" + plaintext[12:] // same secret, another id
	if auth.Hash(plaintext) == auth.Hash(otherID) {
		t.Error("Hash ignores the id")
	}
}

func TestParse_Malformed(t *testing.T) {
	good, _, _ := auth.Generate(auth.RoleUser, "o")
	tests := map[string]string{
		"empty":              "",
		"wrong prefix":       "sbz_" + good[4:],
		"no prefix":          good[4:],
		"upper-case id":      "sbx_ABCDEF01" + good[12:],
		"upper-case secret":  good[:13] + strings.ToUpper(good[13:]),
		"no separator":       good[:12] + "-" + good[13:],
		"short secret":       good[:len(good)-1],
		"long secret":        good + "0",
		"non-hex secret":     good[:len(good)-1] + "g",
		"surrounding spaces": " " + good[1:],
		"trailing newline":   good[:len(good)-1] + "\n",
		"e2b form":           auth.E2BKey(good),
		"non-ASCII":          good[:len(good)-2] + "é",
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := auth.Parse(in)
			var merr *auth.MalformedTokenError
			if !errors.As(err, &merr) || !errors.Is(err, auth.ErrMalformedToken) {
				t.Fatalf("Parse: err = %v, want *MalformedTokenError", err)
			}
			if len(in) > 8 && strings.Contains(err.Error(), in) {
				t.Errorf("error %q quotes the input", err)
			}
		})
	}
}

func TestParseRole(t *testing.T) {
	for _, s := range []string{"admin", "user"} {
		if r, err := auth.ParseRole(s); err != nil || string(r) != s {
			t.Errorf("ParseRole(%q) = %q, %v", s, r, err)
		}
	}
	for _, s := range []string{"", "Admin", "root", "user "} {
		if _, err := auth.ParseRole(s); err == nil {
			t.Errorf("ParseRole(%q) succeeded", s)
		}
	}
}

func TestE2BKey_RoundTrip(t *testing.T) {
	plaintext, _, _ := auth.Generate(auth.RoleUser, "o")
	key := auth.E2BKey(plaintext)
	if !e2bKeyRE.MatchString(key) {
		t.Fatalf("E2B key %q does not match %s", key, e2bKeyRE)
	}
	got, err := auth.FromE2BKey(key)
	if err != nil || got != plaintext {
		t.Errorf("FromE2BKey = %q, %v; want the token back", got, err)
	}
}

func TestFromE2BKey_Malformed(t *testing.T) {
	plaintext, _, _ := auth.Generate(auth.RoleUser, "o")
	key := auth.E2BKey(plaintext)
	tests := map[string]string{
		"empty":             "",
		"plain token":       plaintext,
		"no prefix":         key[4:],
		"upper-case hex":    "e2b_" + strings.ToUpper(key[4:]),
		"odd length":        key[:len(key)-1],
		"not a token":       auth.E2BKey(strings.Repeat("x", len(plaintext))),
		"non-hex":           key[:len(key)-1] + "z",
		"huge":              "e2b_" + strings.Repeat("00", 1<<20),
		"malformed payload": auth.E2BKey(plaintext[:len(plaintext)-1] + "G"),
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := auth.FromE2BKey(in); !errors.Is(err, auth.ErrMalformedToken) {
				t.Errorf("FromE2BKey: err = %v, want ErrMalformedToken", err)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	good, _, _ := auth.Generate(auth.RoleUser, "o")
	f.Add(good)
	f.Add(auth.E2BKey(good))
	f.Add("")
	f.Add("sbx_")
	f.Add("sbx_00000000_")
	f.Add("sbx_0000000g_" + strings.Repeat("0", 64))
	f.Fuzz(func(t *testing.T, s string) {
		id, err := auth.Parse(s)
		if err != nil {
			if !errors.Is(err, auth.ErrMalformedToken) {
				t.Fatalf("Parse: error %v is not ErrMalformedToken", err)
			}
		} else {
			if !tokenRE.MatchString(s) || id != s[4:12] {
				t.Fatalf("Parse accepted %q with id %q", s, id)
			}
			if back, err := auth.FromE2BKey(auth.E2BKey(s)); err != nil || back != s {
				t.Fatalf("E2B round trip of %q = %q, %v", s, back, err)
			}
		}
		if tok, err := auth.FromE2BKey(s); err == nil {
			if _, err := auth.Parse(tok); err != nil || auth.E2BKey(tok) != s {
				t.Fatalf("FromE2BKey(%q) = %q, which is not its inverse", s, tok)
			}
		} else if !errors.Is(err, auth.ErrMalformedToken) {
			t.Fatalf("FromE2BKey: error %v is not ErrMalformedToken", err)
		}
	})
}
