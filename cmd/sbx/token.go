package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/clientconf"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

func (c *cli) tokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "token (create|ls|rm|e2b-key) …",
		Aliases: []string{"tokens"},
		Short:   "Manage API tokens (admin)",
		Args:    args(0, 0, "a subcommand: create, ls, rm or e2b-key"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	var req sandboxd.CreateTokenRequest
	var quota sandboxd.Quota
	create := &cobra.Command{
		Use:   "create --name NAME [--role admin|user] [--owner OWNER] [--max-sandboxes N] [--max-cpu C] [--max-memory-mb M]",
		Short: "Create an API token and print its secret (shown only once)",
		Args:  args(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Name == "" {
				return usagef(cmd, "--name is required")
			}
			if quota != (sandboxd.Quota{}) {
				req.Quota = &quota
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			t, err := cl.CreateToken(cmd.Context(), req)
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(struct {
					*sandboxd.Token
					E2BAPIKey string `json:"e2b_api_key"`
				}{t, auth.E2BKey(t.Secret)})
			}
			// stdout stays the token alone, for scripts; the E2B form is
			// for people (and `sbx token e2b-key` prints it for scripts).
			fmt.Fprintln(c.stdout, t.Secret)
			fmt.Fprintln(c.stderr, "for the E2B SDKs: E2B_API_KEY="+auth.E2BKey(t.Secret))
			return nil
		},
	}
	e2bKey := &cobra.Command{
		Use:   "e2b-key [TOKEN]",
		Short: "Print a token in the e2b_<hex> form every E2B SDK accepts as E2B_API_KEY",
		Long: "Print TOKEN, or the token sbx uses (--token-file, SBX_TOKEN, else .sandboxd/admin.token), in the\n" +
			"form the E2B SDKs take as an API key: e2b_ and the token in hex. The daemon\n" +
			"accepts both forms; SDKs that check the key's format before sending want this one.",
		Args: args(0, 1, "at most one token"),
		RunE: func(cmd *cobra.Command, a []string) error {
			tok := ""
			if len(a) == 1 {
				tok = a[0]
			} else {
				var err error
				if tok, err = c.token(); err != nil {
					return err
				}
				if tok == "" {
					return usagef(cmd, "no token: give one, %s", clientconf.NoTokenHint)
				}
			}
			if _, err := auth.Parse(tok); err != nil {
				return usagef(cmd, "not a sandboxd token: %v", err)
			}
			fmt.Fprintln(c.stdout, auth.E2BKey(tok))
			return nil
		},
	}
	create.Flags().StringVar(&req.Name, "name", "", "what the token is for")
	create.Flags().StringVar((*string)(&req.Role), "role", string(sandboxd.RoleUser), "admin or user")
	create.Flags().StringVar(&req.Owner, "owner", "", "tenant whose sandboxes a user token manages")
	create.Flags().Int64Var(&quota.Sandboxes, "max-sandboxes", 0, "sandboxes the owner may run at once (user tokens; 0: the daemon's default)")
	create.Flags().Float64Var(&quota.CPU, "max-cpu", 0, "CPU cores the owner's sandboxes may hold at once")
	create.Flags().Int64Var(&quota.MemoryMB, "max-memory-mb", 0, "memory in MB the owner's sandboxes may hold at once")
	create.Flags().Int64Var(&quota.DiskMB, "max-disk-mb", 0, "disk in MB the owner's sandboxes' disk limits may add up to")
	cmd.AddCommand(
		create,
		e2bKey,
		&cobra.Command{
			Use:     "ls",
			Aliases: []string{"list"},
			Short:   "List API tokens",
			Args:    args(0, 0, "no arguments"),
			RunE: func(cmd *cobra.Command, _ []string) error {
				cl, err := c.client()
				if err != nil {
					return err
				}
				tokens, err := cl.ListTokens(cmd.Context())
				if err != nil {
					return err
				}
				if c.jsonOut {
					return c.printJSON(map[string]any{"items": nonNil(tokens)})
				}
				tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tNAME\tROLE\tOWNER\tCREATED")
				for _, t := range tokens {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Role, orDash(t.Owner), t.CreatedAt.Local().Format(time.DateTime))
				}
				return tw.Flush()
			},
		},
		&cobra.Command{
			Use:     "rm <id>",
			Aliases: []string{"revoke"},
			Short:   "Revoke an API token",
			Args:    args(1, 1, "one token id"),
			RunE: func(cmd *cobra.Command, a []string) error {
				cl, err := c.client()
				if err != nil {
					return err
				}
				if err := cl.RevokeToken(cmd.Context(), a[0]); err != nil {
					return err
				}
				if c.jsonOut {
					return c.printJSON(map[string]any{"revoked": a[0]})
				}
				return nil
			},
		},
	)
	return cmd
}
