package service

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// undoTimeout bounds each undo step. Undo runs with a fresh context because
// the caller's may be cancelled; it still must not hang forever on a wedged
// dependency (the reconciler finishes what an undo could not).
const undoTimeout = 30 * time.Second

// undoStack collects the undo of every create step that succeeded.
type undoStack struct {
	steps []undoStep
}

type undoStep struct {
	name string
	fn   func(context.Context) error
}

// push records the undo of a step that has just succeeded.
func (u *undoStack) push(name string, fn func(context.Context) error) {
	u.steps = append(u.steps, undoStep{name: name, fn: fn})
}

// run undoes every recorded step in reverse order, each with a fresh
// context, and returns the joined errors of the undos that failed. It keeps
// going after a failed undo: a later step's leftovers are no reason to keep
// an earlier step's.
func (u *undoStack) run(logger *slog.Logger, sandboxID string) error {
	var errs []error
	for i := len(u.steps) - 1; i >= 0; i-- {
		s := u.steps[i]
		ctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
		err := s.fn(ctx)
		cancel()
		if err != nil {
			logger.Error("create rollback step failed", "sandbox", sandboxID, "step", s.name, "err", err)
			errs = append(errs, err)
		}
	}
	u.steps = nil
	return errors.Join(errs...)
}
