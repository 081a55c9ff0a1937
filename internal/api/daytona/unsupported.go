package daytona

import (
	"net/http"

	"github.com/sandboxd/sandboxd/internal/service"
)

// Messages of the Daytona features the facade refuses, in Daytona's error
// shape with 501 Not Implemented, never a 404 (which the SDK would report
// as a missing sandbox or snapshot).
const (
	msgSnapshots = "snapshots are not supported by sandboxd's Daytona facade yet; " +
		"create sandboxes from a local image instead (snapshot: \"<image>\", or image: \"<image>\")"
	msgSandboxSnapshot = "sandbox snapshots (createSnapshot) are not supported by sandboxd's Daytona facade yet"
	msgFork            = "forking sandboxes is not supported by sandboxd's Daytona facade yet"
	msgImageContext    = "declarative images with local files are not supported by sandboxd's Daytona facade: " +
		"it does not build images; build the image and pass it as snapshot"
	msgNetworkSettings = "network settings cannot be changed on sandboxd's Daytona facade: " +
		"set networkBlockAll at create; allow lists are not supported yet"
	msgLSP = "language servers (createLspServer) are not supported by sandboxd's Daytona facade; " +
		"run one with executeCommand or a session"
	msgComputerUse = "computer use (desktop, mouse, keyboard, screenshots) is not supported by sandboxd's Daytona facade"
	msgGit         = "this git operation is not supported by sandboxd's Daytona facade yet; " +
		"git.clone and git.status are, and executeCommand can run git"
	msgPause  = "pausing sandboxes is not supported by sandboxd's Daytona facade; stop the sandbox instead"
	msgResize = "resizing a sandbox is not supported by sandboxd's Daytona facade; " +
		"create a sandbox with the resources it needs"
	msgSSH           = "SSH access is not supported by sandboxd's Daytona facade"
	msgSignedPreview = "signed preview URLs are not supported by sandboxd's Daytona facade; " +
		"use getPreviewLink (its token goes in the x-daytona-preview-token header)"
	msgTTL = "ttlMinutes is not supported by sandboxd's Daytona facade; use setAutoDeleteInterval or setAutostopInterval"
)

// unsupportedRoutes are Daytona API routes the SDK calls that the facade
// refuses (501), with why.
var unsupportedRoutes = map[string]string{
	"POST /snapshots":                     msgSnapshots,
	"GET /snapshots":                      msgSnapshots,
	"GET /snapshots/{id}":                 msgSnapshots,
	"DELETE /snapshots/{id}":              msgSnapshots,
	"POST /snapshots/{id}/activate":       msgSnapshots,
	"POST /snapshots/{id}/deactivate":     msgSnapshots,
	"GET /snapshots/{id}/build-logs":      msgSnapshots,
	"GET /snapshots/{id}/build-logs-url":  msgSnapshots,
	"POST /sandbox/{id}/snapshot":         msgSandboxSnapshot,
	"POST /sandbox/{id}/fork":             msgFork,
	"GET /sandbox/{id}/forks":             msgFork,
	"GET /sandbox/{id}/ancestors":         msgFork,
	"GET /sandbox/{id}/parent":            msgFork,
	"GET /object-storage/push-access":     msgImageContext,
	"POST /sandbox/{id}/network-settings": msgNetworkSettings,

	"POST /sandbox/{id}/pause":                                        msgPause,
	"POST /sandbox/{id}/autopause/{minutes}":                          msgPause,
	"POST /sandbox/{id}/resize":                                       msgResize,
	"POST /sandbox/{id}/ttl/{minutes}":                                msgTTL,
	"POST /sandbox/{id}/ssh-access":                                   msgSSH,
	"DELETE /sandbox/{id}/ssh-access":                                 msgSSH,
	"GET /sandbox/ssh-access/validate":                                msgSSH,
	"GET /sandbox/{id}/ports/{port}/signed-preview-url":               msgSignedPreview,
	"POST /sandbox/{id}/ports/{port}/signed-preview-url/{tok}/expire": msgSignedPreview,

	// Toolbox features, whatever the operation (a served one, like
	// git/clone, is the more specific route and wins).
	"GET /toolbox/{id}/lsp/{op...}":            msgLSP,
	"POST /toolbox/{id}/lsp/{op...}":           msgLSP,
	"GET /toolbox/{id}/computeruse/{op...}":    msgComputerUse,
	"POST /toolbox/{id}/computeruse/{op...}":   msgComputerUse,
	"DELETE /toolbox/{id}/computeruse/{op...}": msgComputerUse,
	"GET /toolbox/{id}/git/{op...}":            msgGit,
	"POST /toolbox/{id}/git/{op...}":           msgGit,
	"DELETE /toolbox/{id}/git/{op...}":         msgGit,
}

// unsupported answers 501 with msg (after authentication, like every
// route: an unauthenticated caller learns nothing).
func unsupported(msg string) handler {
	return func(http.ResponseWriter, *http.Request, service.Caller) error {
		return errorf(http.StatusNotImplemented, "%s", msg)
	}
}
