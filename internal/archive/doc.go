// Package archive copies directory trees as tar streams, in both
// directions, without trusting either end.
//
// [Extract] unpacks a tar stream beneath a directory. The stream is
// hostile: it may come from any API caller (the agent unpacks uploads) or
// from a sandbox (sbx cp -r unpacks downloads on the user's machine). So
// every entry is refused (ErrRefused) when its name or link target is
// absolute or has a ".." component, when a path would be reached through
// a symbolic link (each directory is opened with O_NOFOLLOW from a
// descriptor of its parent, so a symlink in the archive, or one already on
// disk, is never written through), when it is a device node, FIFO or
// anything but a directory, regular file, symbolic link or hard link
// inside the archive, or when it goes past Limits (entries, name length).
// Setuid and setgid bits are dropped, and Limits.Mask's bits (sbx cp -r:
// the user's umask and the sticky bit); owners in the archive are ignored:
// what is created belongs to whoever extracts (the agent runs the
// extraction with the request's user as its file-system identity, see
// package files). Symbolic links are created as they are: their targets
// are data, never followed here. A failure part way leaves what was
// written so far (as docker cp does); repeating the extraction writes the
// same tree.
//
// [Write] archives a path: a directory tree, a file or a symbolic link,
// entries named under a root name the caller chooses. It never follows a
// symbolic link below the root (each is archived as a link) and archives
// only directories, regular files and symbolic links.
package archive
