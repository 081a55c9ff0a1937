package auth

import "context"

// Principal is the authenticated caller of a request.
type Principal struct {
	TokenID string
	Role    Role
	Owner   string
	// Quota is the token's; always zero (unlimited) for an admin.
	Quota Quota
}

// IsAdmin reports whether p may manage everything, tokens included.
func (p Principal) IsAdmin() bool { return p.Role == RoleAdmin }

// CanSee reports whether p may see a resource owned by owner: an admin sees
// every resource, a user only those whose owner is the user's (non-empty)
// owner. Any other role sees nothing.
func (p Principal) CanSee(owner string) bool {
	switch p.Role {
	case RoleAdmin:
		return true
	case RoleUser:
		return p.Owner != "" && p.Owner == owner
	}
	return false
}

type principalKey struct{}

// WithPrincipal returns a copy of ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal carried by ctx, and whether there is
// one. Handlers behind authentication may treat its absence as a bug.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
