package operator

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/store"
)

// TokenCommand runs `sandboxd token create|list|revoke` against the data
// directory's database (the daemon may be running: SQLite serializes the
// writers of both processes).
func TokenCommand(args []string, stdout, stderr io.Writer) int {
	usage := func() int {
		fmt.Fprintln(stderr, "usage: sandboxd token create --name N [--role admin|user] [--owner O] [--quota sandboxes=N,cpu=C,memory_mb=M,disk_mb=D] | list | revoke ID  [--data-dir DIR]")
		return 2
	}
	if len(args) == 0 {
		return usage()
	}
	verb := args[0]
	fs := flag.NewFlagSet("token "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", envOr("SANDBOXD_DATA_DIR", ".sandboxd"), "data directory")
	name := fs.String("name", "", "a label for the token (create)")
	role := fs.String("role", "user", "admin or user (create)")
	owner := fs.String("owner", "", "tenant whose sandboxes a user token sees (create; default: the name)")
	quota := fs.String("quota", "", "what a user token's owner may hold at once: sandboxes=N,cpu=C,memory_mb=M,disk_mb=D (create; default unlimited)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(*dataDir, "sandboxd.db"), store.Options{})
	if err != nil {
		fmt.Fprintln(stderr, "sandboxd token:", err)
		return 1
	}
	defer st.Close()

	switch verb {
	case "create":
		r, err := auth.ParseRole(*role)
		if err != nil || *name == "" {
			fmt.Fprintln(stderr, "sandboxd token create: --name is required and --role must be admin or user")
			return 2
		}
		if *owner == "" {
			*owner = *name
		}
		q, err := config.ParseQuota(*quota)
		if err != nil || (r == auth.RoleAdmin && q != (config.Quota{})) {
			fmt.Fprintln(stderr, "sandboxd token create: --quota: want sandboxes=N,cpu=C,memory_mb=M,disk_mb=D, for a user token only:", err)
			return 2
		}
		plain, tok, hash := auth.Generate(r, *owner)
		t := store.APIToken{ID: tok.ID, Name: *name, Role: store.Role(r), Owner: *owner, Quota: store.Quota(q)}
		if err := st.CreateAPIToken(ctx, &t, hash); err != nil {
			fmt.Fprintln(stderr, "sandboxd token create:", err)
			return 1
		}
		if *asJSON {
			_ = json.NewEncoder(stdout).Encode(map[string]any{"id": t.ID, "name": t.Name, "role": string(t.Role), "owner": t.Owner, "quota": t.Quota, "token": plain, "e2b_api_key": auth.E2BKey(plain)})
		} else {
			// stdout stays the token alone, for scripts; the e2b_ form,
			// which every E2B SDK accepts as E2B_API_KEY, is for people.
			fmt.Fprintln(stdout, plain)
			fmt.Fprintln(stderr, "for the E2B SDKs: E2B_API_KEY="+auth.E2BKey(plain))
		}
	case "list":
		ts, err := st.ListAPITokens(ctx)
		if err != nil {
			fmt.Fprintln(stderr, "sandboxd token list:", err)
			return 1
		}
		if *asJSON {
			_ = json.NewEncoder(stdout).Encode(ts)
			return 0
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tROLE\tOWNER\tQUOTA\tCREATED\tREVOKED")
		for _, t := range ts {
			revoked := ""
			if !t.RevokedAt.IsZero() {
				revoked = t.RevokedAt.Format("2006-01-02 15:04")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Role, t.Owner, quotaString(t.Quota), t.CreatedAt.Format("2006-01-02 15:04"), revoked)
		}
		tw.Flush()
	case "revoke":
		if fs.NArg() != 1 {
			return usage()
		}
		if err := st.RevokeAPIToken(ctx, fs.Arg(0)); err != nil {
			fmt.Fprintln(stderr, "sandboxd token revoke:", err)
			if errors.Is(err, store.ErrNotFound) {
				return 3
			}
			return 1
		}
	default:
		return usage()
	}
	return 0
}

// quotaString shows a quota as --quota takes it; "-" for none.
func quotaString(q store.Quota) string {
	var parts []string
	if q.Sandboxes > 0 {
		parts = append(parts, fmt.Sprintf("sandboxes=%d", q.Sandboxes))
	}
	if q.MilliCPU > 0 {
		parts = append(parts, fmt.Sprintf("cpu=%g", float64(q.MilliCPU)/1000))
	}
	if q.MemoryMB > 0 {
		parts = append(parts, fmt.Sprintf("memory_mb=%d", q.MemoryMB))
	}
	if q.DiskMB > 0 {
		parts = append(parts, fmt.Sprintf("disk_mb=%d", q.DiskMB))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}
