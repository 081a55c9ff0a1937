package e2b

import "encoding/json"

// DeliveryScope is the claim scope of DedupeUndelivered.
const DeliveryScope = deliveryScope

// BodyFingerprint is the fingerprint a v2 create of body (JSON) by owner
// claims under, with the default templates.
func BodyFingerprint(owner string, body []byte) (string, error) {
	f := New(Options{Service: noNetwork{}, AccessTokenKey: make([]byte, 32)}) // the fingerprint does not depend on the daemon's network
	var b newSandboxBody
	if err := json.Unmarshal(body, &b); err != nil {
		return "", err
	}
	b.Secure = nil
	req, err := f.createRequest(owner, b, nil)
	if err != nil {
		return "", err
	}
	return fingerprint(req), nil
}
