package service

import (
	"strings"
	"testing"
)

func TestMergeEnvList(t *testing.T) {
	got := mergeEnvList([]string{"PATH=/bin", "A=1", "B=2"}, map[string]string{"A": "", "C": "3"})
	if want := "PATH=/bin B=2 A= C=3"; strings.Join(got, " ") != want {
		t.Errorf("mergeEnvList = %q, want %q", got, want)
	}
}
