package docker

import "time"

// SetCommitLeftoverAge sets how old Commit's leftover intermediate
// container must be before r's ListOurs removes it.
func SetCommitLeftoverAge(r *Runtime, d time.Duration) { r.commitLeftoverAge = d }

// QgroupsInconsistent reports whether the kernel has stopped counting the
// qgroups of r's engine (false where r enforces no btrfs limit).
func QgroupsInconsistent(r *Runtime) bool {
	return r.diskLatched.Load() && r.disk.qgroups != nil && r.disk.qgroups.inconsistent()
}
