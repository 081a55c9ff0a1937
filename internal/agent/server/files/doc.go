// Package files serves envd's plain-HTTP file transfer endpoints:
//
//	GET  /files?path=&username=   download one file
//	POST /files?path=&username=   upload one or more files
//
// Both act as the user the request selects ([account.Directory.FromRequest];
// root by default) and resolve relative paths against that user's home
// ([account.Resolve]).
//
// Downloads stream the file as application/octet-stream with Content-Length,
// Content-Disposition and Range support. A missing file is 404, a directory
// 400.
//
// Uploads accept multipart/form-data (every part named "file" is written; its
// destination is the path parameter if given, otherwise the part's filename,
// taken verbatim from Content-Disposition, not the base name Go's
// [mime/multipart.Part.FileName] returns) or a raw application/octet-stream
// body (path parameter required; Content-Encoding: gzip is decoded). Each file
// is written to a temporary file in the destination directory and renamed
// into place, so readers see the old content or the new, never a torn
// write. Missing parent directories are created; they and the file are owned
// by the selected user. X-Metadata-<key> headers (envd 0.6.2) become the
// metadata of every file the upload writes, replacing what it had
// (package filemeta); a key or value the SDK would not send is 400 before
// anything is written. The answer is the JSON array of written files,
// [{"name","type":"file","path","metadata"?}], that E2B's SDKs require. The body is
// streamed part by part through a fixed buffer: memory use does not grow with
// the upload size. Parts before a failed one stay written.
//
// A raw upload of known length (1 MiB or more) is read from the hijacked
// connection and spliced into the file (splice.go); its answer carries
// Connection: close.
//
// PUT and GET [PathArchive] (the daemon's only: the facades' transport
// refuses /sandboxd/) move directory trees as tar streams, as the
// request's user, through package archive (archive.go).
//
// Errors are JSON {"code": <HTTP status>, "message": "..."} as in envd's REST
// API: 400 for bad input (unknown user, NUL in path, directory, malformed
// body), 403 for permission denied, 404 for a missing file, 507 when the disk
// is full, 500 otherwise.
package files
