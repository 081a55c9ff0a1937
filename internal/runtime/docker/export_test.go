package docker

import "time"

// SetCommitLeftoverAge sets how old Commit's leftover intermediate
// container must be before r's ListOurs removes it.
func SetCommitLeftoverAge(r *Runtime, d time.Duration) { r.commitLeftoverAge = d }
