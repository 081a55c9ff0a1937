package files

import (
	"log/slog"
	"net/http"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
)

// Options configure a [Handler]. The zero value is usable.
type Options struct {
	// Users resolves the user a request acts as; default /etc/passwd.
	Users *account.Directory
	// Log receives server-side failures (HTTP 5xx); default discards.
	Log *slog.Logger
}

// Handler serves GET and POST /files. Create it with [New]; it is safe for
// concurrent use and holds no resources between requests.
type Handler struct {
	users *account.Directory
	log   *slog.Logger
}

var _ http.Handler = (*Handler)(nil)

// New returns the /files handler.
func New(o Options) *Handler {
	h := &Handler{users: o.Users, log: o.Log}
	if h.users == nil {
		h.users = account.NewDirectory(account.DefaultPasswd)
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	return h
}

// Handle registers GET (and HEAD) and POST /files, and GET and PUT
// [PathArchive] on mux.
func (h *Handler) Handle(mux *http.ServeMux) {
	mux.HandleFunc("GET /files", h.download)
	mux.HandleFunc("POST /files", h.upload)
	mux.HandleFunc("GET "+PathArchive, h.getArchive)
	mux.HandleFunc("PUT "+PathArchive, h.putArchive)
}

// ServeHTTP dispatches on the method, for callers that mount the handler
// without method patterns.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		h.download(w, r)
	case http.MethodPost:
		h.upload(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeJSONError(w, http.StatusMethodNotAllowed, "method not allowed")
	}
}

// target returns the user r acts as and the absolute path it names in the
// query parameter "path".
func (h *Handler) target(r *http.Request) (account.User, string, error) {
	u, err := h.users.FromRequest(r)
	if err != nil {
		return account.User{}, "", err
	}
	p, err := account.Resolve(u, r.URL.Query().Get("path"))
	return u, p, err
}
