//go:build !unix

package main

import (
	"context"
	"io"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// watchResize does nothing where there is no SIGWINCH.
func watchResize(context.Context, io.Writer, *sandboxd.Process) (stop func()) { return func() {} }
