package v1

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// decodeJSON decodes r's body, one JSON object, into v. It rejects an empty
// body, anything but an object, unknown fields, a type mismatch and any
// data after the object, each as invalid_argument naming the problem. A
// body past the route's cap surfaces as *http.MaxBytesError (413).
func decodeJSON(r *http.Request, v any) error { return decodeBody(r, v, false) }

// decodeOptionalJSON is decodeJSON for a route whose fields are all
// optional: an empty body leaves v as it is.
func decodeOptionalJSON(r *http.Request, v any) error { return decodeBody(r, v, true) }

// errEmptyBody is expectObject's answer to a body with nothing in it.
var errEmptyBody = errorf(CodeInvalidArgument, "the request body is empty; send a JSON object")

func decodeBody(r *http.Request, v any, optional bool) error {
	br := bufio.NewReader(r.Body)
	if err := expectObject(br); err != nil {
		if optional && err == errEmptyBody {
			return nil
		}
		return err
	}
	dec := json.NewDecoder(br)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	switch _, err := dec.Token(); {
	case err == io.EOF:
		return nil
	case isTooLarge(err):
		return err
	default:
		return errorf(CodeInvalidArgument, "unexpected data after the JSON object")
	}
}

// expectObject checks, without consuming it, that the first non-space byte
// is '{'; json.Decoder alone would accept null and leave v untouched.
func expectObject(br *bufio.Reader) error {
	for {
		b, err := br.Peek(1)
		switch {
		case err == io.EOF:
			return errEmptyBody
		case err != nil:
			return decodeError(err)
		}
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			_, _ = br.Discard(1)
		case '{':
			return nil
		default:
			return errorf(CodeInvalidArgument, "the request body must be a JSON object")
		}
	}
}

func decodeError(err error) error {
	var (
		syntax   *json.SyntaxError
		mismatch *json.UnmarshalTypeError
	)
	switch {
	case isTooLarge(err):
		return err
	case errors.As(err, &syntax):
		return errorf(CodeInvalidArgument, "malformed JSON at byte %d: %v", syntax.Offset, syntax)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(CodeInvalidArgument, "malformed JSON: the body ends early")
	case errors.As(err, &mismatch):
		return errorf(CodeInvalidArgument, "field %q: cannot use a JSON %s here", mismatch.Field, mismatch.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no type for this one; its text is stable and
		// names only the field.
		return errorf(CodeInvalidArgument, "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return errorf(CodeInvalidArgument, "malformed JSON")
}

func isTooLarge(err error) bool {
	var tooLarge *http.MaxBytesError
	return errors.As(err, &tooLarge)
}

// query validates r's query string: only the keys allowed accepts may
// appear, each at most once, and no value may contain a NUL byte.
func query(r *http.Request, allowed func(key string) bool) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, errorf(CodeInvalidArgument, "malformed query string")
	}
	for k, vs := range q {
		if !allowed(k) {
			return nil, errorf(CodeInvalidArgument, "unknown query parameter %q", k)
		}
		if len(vs) > 1 {
			return nil, errorf(CodeInvalidArgument, "query parameter %q is repeated", k)
		}
		if strings.ContainsRune(k, 0) || strings.ContainsRune(vs[0], 0) {
			return nil, errorf(CodeInvalidArgument, "query parameter %q contains a NUL byte", k)
		}
	}
	return q, nil
}

// intParam parses q[key] as an integer in [lo, hi], or returns def when it
// is absent.
func intParam(q url.Values, key string, lo, hi, def int) (int, error) {
	s, ok := q[key]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(s[0])
	if err != nil || n < lo || n > hi {
		return 0, errorf(CodeInvalidArgument, "%s must be an integer from %d to %d", key, lo, hi)
	}
	return n, nil
}

// pathParam returns the query parameter "path", which file routes require.
func pathParam(r *http.Request) (string, error) {
	q, err := query(r, func(k string) bool { return k == "path" })
	if err != nil {
		return "", err
	}
	p := q.Get("path")
	if p == "" {
		return "", errorf(CodeInvalidArgument, "the query parameter path is required")
	}
	return p, nil
}

// idempotencyKey returns the Idempotency-Key header ("" when absent). A
// key is 1-255 printable ASCII characters.
func idempotencyKey(r *http.Request) (string, error) {
	vs := r.Header.Values("Idempotency-Key")
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		return "", errorf(CodeInvalidArgument, "more than one Idempotency-Key header")
	}
	k := vs[0]
	if len(k) < 1 || len(k) > 255 {
		return "", errorf(CodeInvalidArgument, "Idempotency-Key must be 1 to 255 characters")
	}
	for i := range len(k) {
		if k[i] < 0x20 || k[i] > 0x7e {
			return "", errorf(CodeInvalidArgument, "Idempotency-Key must be printable ASCII")
		}
	}
	return k, nil
}

// fieldError is an invalid_argument about one request field.
func fieldError(field, format string, args ...any) error {
	return errorf(CodeInvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
}
