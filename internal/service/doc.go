// Package service is sandboxd's domain: the create chain with rollback,
// destroy, start and stop, exec and files, and the reconciler and reaper
// that keep the host equal to the database.
//
// # The create chain
//
// Every create — a new sandbox, one with a chosen id, or a recreate after
// failover — runs through one private worker, [Service.create]. It is a
// chain of steps; each step that succeeds pushes its undo onto a stack, and
// any later failure runs the stack in reverse with a fresh context (the
// caller's may already be cancelled):
//
//  1. topology gate (a non-worker never creates locally)
//  2. normalize and validate the request; reject before any side effect
//  3. seal secret env and mount credentials
//  4. generate the agent token and an Ed25519 SSH key pair
//  5. choose the id (the override on the recreate path)
//  6. insert the row in state creating        → undo: delete the row
//  7. admission: reserve CPU and memory        → undo: release
//  8. mounts: prepare volume directories       → undo: unmount
//  9. runtime create + start, agent ready      → undo: destroy the container
//  10. route install                           → undo: remove the route
//  11. mark the row running, store the mounts
//
// The row goes in first (DESIGN.md puts it near the end): the partial
// unique index on name then rejects a duplicate name with one INSERT
// instead of after a container create, and a daemon killed mid-create
// leaves a row in state creating that the reconciler finds and rolls back.
// Containers carry their sandbox id as a label, so a container without a
// row is also found and destroyed.
//
// Each step is timed; the timings travel back to the API edge as
// [StepTiming] values (Server-Timing) and into the create-latency histogram.
package service
