// Package version holds the build's version string, stamped by the
// Makefile with -ldflags.
package version

// Version is the release or git description of this build; "dev" when the
// binary was built without the Makefile.
var Version = "dev"
