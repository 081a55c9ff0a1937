// Package filesystem implements envd's filesystem.Filesystem Connect
// service: Stat, MakeDir, Move, ListDir, Remove, the WatchDir stream and the
// polling watcher (CreateWatcher, GetWatcherEvents, RemoveWatcher).
//
// Every call acts as the user its Authorization header selects
// ([account.Directory.FromHeader]; root by default). Relative paths and "~"
// are relative to that user's home. The agent runs as root and does not
// check the user's permissions (neither does envd); the user matters for
// path resolution and for ownership: directories MakeDir and Move create
// belong to that user.
//
// Entries follow envd: a symlink is reported with the type of its target and
// symlink_target set to the resolved target path; a dangling symlink is
// FILE_TYPE_SYMLINK; sockets, FIFOs and devices are FILE_TYPE_UNSPECIFIED
// (the SDKs skip those). mode holds the Unix permission bits (with setuid,
// setgid and sticky), permissions Go's ls-style string.
//
// Watching uses inotify through fsnotify. Event names are relative to the
// watched directory. A recursive watch adds a watch for every directory
// created under it and reports what was created inside the new directory
// before its watch was in place as CREATE events, so "mkdir -p a/b/c" is seen
// whole; such an entry may be reported twice. One event with several
// operations is reported as one event per operation (CREATE, RENAME, CHMOD,
// WRITE, REMOVE), as envd does. The stream begins with a start event and
// carries a keepalive after every quiet Keepalive-Ping-Interval seconds.
// Polling watchers buffer at most [Options.MaxWatcherEvents] events (the
// oldest are dropped) and are closed when not polled for
// [Options.WatcherIdle]; at most [Options.MaxWatchers] exist at once.
//
// Domain errors map to Connect codes in one place ([toConnect]): missing
// paths not_found, an existing target already_exists, bad input (NUL byte,
// unknown user, a file where a directory is needed) invalid_argument, EACCES
// and EPERM permission_denied, a full disk or exhausted inotify limits
// resource_exhausted.
package filesystem
