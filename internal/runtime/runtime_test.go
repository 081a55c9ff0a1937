package runtime_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

func validSpec() runtime.Spec {
	return runtime.Spec{
		SandboxID:   "sb-0123456789abcdef",
		Image:       "sandboxd/busybox:latest",
		AgentBinary: "/usr/local/bin/toolboxd",
		AgentToken:  "secret",
	}
}

func TestSpecValidate(t *testing.T) {
	if err := validSpec().Validate(); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	for name, mutate := range map[string]func(*runtime.Spec){
		"EmptyID":        func(s *runtime.Spec) { s.SandboxID = "" },
		"UpperCaseID":    func(s *runtime.Spec) { s.SandboxID = "SB-1" },
		"PathID":         func(s *runtime.Spec) { s.SandboxID = "a/b" },
		"DotDotID":       func(s *runtime.Spec) { s.SandboxID = ".." },
		"TrailingHyphen": func(s *runtime.Spec) { s.SandboxID = "sb-" },
		"LongID":         func(s *runtime.Spec) { s.SandboxID = strings.Repeat("a", 64) },
		"NoImage":        func(s *runtime.Spec) { s.Image = "" },
		"NegativeCPU":    func(s *runtime.Spec) { s.CPU = -1 },
		"NegativePids":   func(s *runtime.Spec) { s.PidsLimit = -1 },
		"RelativeAgent":  func(s *runtime.Spec) { s.AgentBinary = "bin/toolboxd" },
		"NoToken":        func(s *runtime.Spec) { s.AgentToken = "" },
		"BadEnvKey":      func(s *runtime.Spec) { s.Env = map[string]string{"A=B": "x"} },
		"TokenEnv":       func(s *runtime.Spec) { s.Env = map[string]string{runtime.EnvAgentToken: "x"} },
		"ReservedLabel":  func(s *runtime.Spec) { s.Labels = map[string]string{runtime.LabelManaged: "0"} },
		"RelativeMount":  func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{HostPath: "data", Path: "/data"}} },
		"MountOverAgent": func(s *runtime.Spec) { s.Mounts = []runtime.Mount{{HostPath: "/srv", Path: runtime.AgentSocketDir}} },
	} {
		t.Run(name, func(t *testing.T) {
			s := validSpec()
			mutate(&s)
			if err := s.Validate(); !errors.Is(err, runtime.ErrInvalidSpec) {
				t.Errorf("Validate() = %v, want ErrInvalidSpec", err)
			}
		})
	}
}

func TestSpecValidate_SecretNotInError(t *testing.T) {
	s := validSpec()
	s.AgentToken = "hunter2-do-not-log"
	s.SandboxID = "BAD"
	err := s.Validate()
	if err == nil || strings.Contains(err.Error(), s.AgentToken) {
		t.Errorf("Validate() = %v; want an error without the token", err)
	}
}

func TestValidSandboxID(t *testing.T) {
	for id, want := range map[string]bool{
		"sb-0123456789abcdef":   true,
		"a":                     true,
		strings.Repeat("a", 63): true,
		strings.Repeat("a", 64): false,
		"-a":                    false,
		"a_b":                   false,
		"":                      false,
	} {
		if got := runtime.ValidSandboxID(id); got != want {
			t.Errorf("ValidSandboxID(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestAgentNotReadyError(t *testing.T) {
	last := context.DeadlineExceeded
	var err error = &runtime.AgentNotReadyError{
		SandboxID: "sb-0123456789abcdef",
		Status:    runtime.Status{State: runtime.StateExited, ExitCode: 3},
		LogsTail:  "boom",
		Err:       last,
	}
	err = errors.Join(errors.New("context"), err) // as if wrapped by a caller
	if !errors.Is(err, runtime.ErrAgentNotReady) {
		t.Errorf("errors.Is(err, ErrAgentNotReady) = false")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is(err, last probe error) = false")
	}
	var nr *runtime.AgentNotReadyError
	if !errors.As(err, &nr) || nr.LogsTail != "boom" {
		t.Errorf("errors.As = %v, %+v", errors.As(err, &nr), nr)
	}
	for _, want := range []string{"exit code 3", "boom", "deadline exceeded"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err.Error(), want)
		}
	}
}
