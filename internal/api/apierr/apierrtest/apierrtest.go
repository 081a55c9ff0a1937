// Package apierrtest checks the messages the edges answer for the faults
// that make an error hard to act on: a lower package's prefix ("agent:",
// "store:"), or a code said twice ("invalid argument: invalid argument:",
// "not found: not_found: …"). The error table's test and the conformance
// suite run every message they see through [Unclear].
package apierrtest

import (
	"regexp"
	"strings"
)

// prefixes are packages whose name must not lead a part of a message a
// user reads. "runtime" is not one: it is also a request field's name.
var prefixRE = regexp.MustCompile(`(^|[\s:("])(agent|store|service|ingress|cluster|admission|apierr|toolboxd|connect): `)

// connectCodeRE is a Connect code word as Connect's own error text puts
// it in front of a message ("invalid_argument: …").
var connectCodeRE = regexp.MustCompile(`(^|[\s:])(canceled|unknown|invalid_argument|deadline_exceeded|not_found|already_exists|permission_denied|resource_exhausted|failed_precondition|aborted|out_of_range|unimplemented|internal|unavailable|data_loss|unauthenticated): `)

// codeWords are the words of the error classes; each may be said once.
var codeWords = []string{
	"invalid argument", "not found", "conflict", "permission denied",
	"unavailable", "capacity exhausted", "quota exceeded", "disk is full",
}

// Unclear returns why msg is not a message a person can act on once,
// or "" when it is fine.
func Unclear(msg string) string {
	if m := prefixRE.FindStringSubmatch(msg); m != nil {
		return "a package prefix " + strings.TrimSpace(m[2]) + ":"
	}
	if m := connectCodeRE.FindStringSubmatch(msg); m != nil {
		return "a Connect code word " + m[2] + ":"
	}
	low := strings.ReplaceAll(strings.ToLower(msg), "_", " ")
	for _, w := range codeWords {
		if strings.Count(low, w) > 1 {
			return "the code word " + `"` + w + `" said twice`
		}
	}
	return ""
}
