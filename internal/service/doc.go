// Package service is sandboxd's domain: create-once and the create chain
// with rollback, destroy, start and stop, exec and files, ports and
// domains, and the reconciler (a pure [Decide] plus small effects) and
// reaper that keep the host equal to the database.
//
// # The create chain
//
// [Service.CreateOnce] is the one entry for creates that must not happen
// twice (an idempotency key, E2B's body dedupe): it claims the key, runs
// the chain under the claim and completes it (docs/design.md, section 4).
// Under [OnceKey.Delivery] (E2B's creates without a key) nothing is
// collapsed: each create has its own delivery claim, and only a create
// whose client went away before its answer ([Delivery]) is adopted by an
// identical one within the window, or destroyed after it.
// Every create — a new sandbox, one with a chosen id, one under a claim —
// runs through one private worker, [Service.create]. It is a chain of
// steps (createChain in create.go, one method of creation per step,
// named in the comment of each below); each step that succeeds pushes its undo onto a
// stack, and any later failure runs the stack in reverse with a fresh
// context (the caller's may already be cancelled):
//
//  1. readiness (the startup repair succeeded) and the topology gate
//     (gate)
//  2. normalize and validate the request; reject before any side effect
//     (validate); 2b. the warm pool (servePooled, poolclaim.go);
//     2c. the image, pulled when the engine lacks it (image, pull.go)
//  3. choose the id (random, derived from the claim, or given)
//  4. seal the secret env
//  5. generate the agent token and an Ed25519 SSH key pair (3–5: seal)
//  6. under a claim, attach the id to it; insert the row
//     in state creating, with no expiry yet   → undo: delete the row
//     (insertRow); 6b. cluster mode: the placement and the name
//     (claimCluster)                          → undo: release them
//  7. admission: reserve CPU and memory (admit) → undo: release
//  8. mounts: prepare volume directories, and stage each subpath mount
//     (internal/volume: opened beneath the volume without following
//     links, bind-mounted from the fd at a daemon-owned staging path the
//     runtime gets as the source)           → undo: abandon (detach the
//     staged mounts, remove what this create made) (prepareMounts)
//  9. runtime create + start, agent ready      → undo: destroy the container
//     (startRuntime); 9a. with network, the network policy
//     (applyNetwork)                          → undo: remove it;
//     9b. with a secret env, hand it to the agent over its channel (it is
//     never in the engine's configuration of the container) (handSecretEnv)
//  10. route install (installRoute)            → undo: remove the route
//  11. store the mounts (storeMounts); commit: the row goes running and its
//     timeout starts (store.CommitCreate, one write) (commit)
//
// The row goes in before the container: the partial unique index on name
// then rejects a duplicate name with one INSERT instead of after a
// container create, and a daemon killed mid-create leaves a row in state
// creating that the reconciler finds and rolls back. Containers carry
// their sandbox id as a label, so a container without a row is also found
// and destroyed. The timeout counts from the commit, so the reaper never
// sees a half-made sandbox as expired.
//
// Each step is timed; the timings travel back to the API edge as
// [StepTiming] values (Server-Timing) and into the create-latency histogram.
//
// # Lifecycle rules
//
// A sandbox's [Lifecycle] (auto-stop after idle, auto-delete after a stop
// or at it, auto-archive, pause on timeout) is kept on its row and applied
// by the background loop ([Service.ApplyLifecycle], rules.go), so it holds
// across a daemon restart; the facades only translate their wire fields to
// and from it, and record activity ([Service.Touch]).
package service
