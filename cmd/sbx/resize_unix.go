//go:build unix

package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// watchResize resizes the remote terminal whenever the local one changes
// size (SIGWINCH) until stop is called or ctx ends.
func watchResize(ctx context.Context, out io.Writer, p *sandboxd.Process) (stop func()) {
	f, ok := out.(*os.File)
	if !ok {
		return func() {}
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-ch:
				if w, h, err := term.GetSize(int(f.Fd())); err == nil {
					p.Resize(w, h)
				}
			case <-done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
		<-finished
	}
}
