package daytona

import (
	"net/http"

	"github.com/sandboxd/sandboxd/internal/service"
)

// Messages of the Daytona features the facade refuses, in Daytona's error
// shape with 501 Not Implemented, never a 404 (which the SDK would report
// as a missing sandbox or snapshot).
const (
	msgDeactivate = "deactivating snapshots is not supported by sandboxd's Daytona facade: " +
		"a snapshot here is always active until it is deleted"
	msgForkTree = "fork lineage (forks, parent, ancestors) is not tracked by sandboxd's Daytona facade; " +
		"a fork is an independent sandbox"
	msgImageContext = "declarative images with local files (addLocalFile, addLocalDir, " +
		"pipInstallFromRequirements, …) need object storage, which sandboxd's Daytona facade does not serve; " +
		"put the files in with runCommands, or build the image on the host and pass it as snapshot"
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
	"POST /snapshots/{sid}/deactivate": msgDeactivate,
	"GET /sandbox/{id}/forks":          msgForkTree,
	"GET /sandbox/{id}/ancestors":      msgForkTree,
	"GET /sandbox/{id}/parent":         msgForkTree,
	"GET /object-storage/push-access":  msgImageContext,

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
