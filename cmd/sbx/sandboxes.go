package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

func (c *cli) createCmd() *cobra.Command {
	var (
		req         sandboxd.CreateRequest
		env, tags   []string
		allow, deny []string
	)
	cmd := &cobra.Command{
		Use:   "create [--image IMAGE | --template TEMPLATE] [--name NAME] [--cpu N] [--memory MB] [--env K=V]… [--tag K=V]… [--timeout 10m]",
		Short: "Create a sandbox and print its id",
		Args:  args(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if req.Env, err = parseKV(cmd, "env", env); err != nil {
				return err
			}
			if req.Tags, err = parseKV(cmd, "tag", tags); err != nil {
				return err
			}
			if req.CPU < 0 || req.MemoryMB < 0 || req.DiskMB < 0 || req.Timeout < 0 {
				return usagef(cmd, "--cpu, --memory, --disk and --timeout must not be negative")
			}
			req.NoTimeout = req.Timeout == 0 && cmd.Flags().Changed("timeout")
			if len(allow) > 0 || len(deny) > 0 {
				mode := sandboxd.NetworkOpen
				if len(allow) > 0 {
					mode = sandboxd.NetworkRestricted
				}
				req.NetworkPolicy = &sandboxd.NetworkPolicy{Mode: mode, Allow: allow, Deny: deny}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			sb, err := cl.CreateSandbox(cmd.Context(), req)
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(sb)
			}
			fmt.Fprintln(c.stdout, sb.ID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Image, "image", "", "image to run (default: the daemon's base image)")
	f.StringVar(&req.Template, "template", "", "template (id or name) to create from, instead of an image")
	f.StringVar(&req.Name, "name", "", "unique name of the sandbox")
	f.Float64Var(&req.CPU, "cpu", 0, "CPUs")
	f.IntVar(&req.MemoryMB, "memory", 0, "memory in MiB")
	f.IntVar(&req.DiskMB, "disk", 0, "disk limit in MiB: what the sandbox may write to its file system (default: the daemon's)")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable `K=V` (repeatable)")
	f.StringArrayVar(&tags, "tag", nil, "tag `K=V` (repeatable)")
	f.DurationVar(&req.Timeout, "timeout", 0, "destroy the sandbox after this long (e.g. 10m; 0: never; default: the daemon's --default-timeout, 1h unless changed)")
	f.BoolVar(&req.Network, "network", false, "give the sandbox outbound network access")
	f.StringSliceVar(&allow, "allow", nil, "restrict the network to these CIDRs and host names (repeat or comma-separate; implies --network)")
	f.StringSliceVar(&deny, "deny", nil, "CIDRs the sandbox never reaches (implies --network)")
	return cmd
}

func (c *cli) lsCmd() *cobra.Command {
	var (
		opts sandboxd.ListOptions
		tags []string
	)
	cmd := &cobra.Command{
		Use:     "ls [--name NAME] [--tag K=V]… [--state STATE]",
		Aliases: []string{"list"},
		Short:   "List sandboxes",
		Args:    args(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if opts.Tags, err = parseKV(cmd, "tag", tags); err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			items := []sandboxd.Sandbox{}
			for sb, err := range cl.AllSandboxes(cmd.Context(), opts) {
				if err != nil {
					return err
				}
				items = append(items, *sb)
			}
			if c.jsonOut {
				return c.printJSON(map[string]any{"items": items})
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tSTATE\tIMAGE\tCREATED\tTAGS")
			for _, sb := range items {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, orDash(sb.Name), sb.State, sb.Image,
					sb.CreatedAt.Local().Format(time.DateTime), orDash(formatKV(sb.Tags)))
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Name, "name", "", "only the sandbox with this name")
	f.StringArrayVar(&tags, "tag", nil, "only sandboxes with tag `K=V` (repeatable; all must match)")
	f.StringVar((*string)(&opts.State), "state", "", "only sandboxes in this state")
	return cmd
}

func (c *cli) getCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get <id|name>",
		Short: "Show a sandbox",
		Args:  args(1, 1, "one sandbox id or name"),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			sb, err := cl.GetSandbox(cmd.Context(), a[0])
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(sb)
			}
			return c.printSandbox(sb)
		},
	}
}

func (c *cli) printSandbox(sb *sandboxd.Sandbox) error {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("id", sb.ID)
	row("name", orDash(sb.Name))
	row("state", string(sb.State))
	if !sb.HibernatedAt.IsZero() {
		row("hibernated", sb.HibernatedAt.Local().Format(time.RFC3339))
	}
	if sb.ErrorReason != "" {
		row("error", sb.ErrorReason)
	}
	row("image", sb.Image)
	row("cpu", fmt.Sprint(sb.CPU))
	row("memory", fmt.Sprintf("%d MiB", sb.MemoryMB))
	if sb.DiskMB > 0 {
		enforced := "enforced"
		if !sb.DiskEnforced {
			enforced = "NOT enforced on this host"
		}
		row("disk", fmt.Sprintf("%d MiB (%s)", sb.DiskMB, enforced))
	}
	row("network", fmt.Sprint(sb.Network))
	row("tags", orDash(formatKV(sb.Tags)))
	row("created", sb.CreatedAt.Local().Format(time.RFC3339))
	if !sb.ExpiresAt.IsZero() {
		row("expires", sb.ExpiresAt.Local().Format(time.RFC3339))
	}
	return tw.Flush()
}

func (c *cli) startCmd() *cobra.Command { return c.lifecycleCmd("start", "Start a stopped sandbox") }
func (c *cli) stopCmd() *cobra.Command  { return c.lifecycleCmd("stop", "Stop a running sandbox") }
func (c *cli) pauseCmd() *cobra.Command {
	return c.lifecycleCmd("pause", "Freeze a running sandbox's processes in memory")
}
func (c *cli) hibernateCmd() *cobra.Command {
	return c.lifecycleCmd("hibernate", "Checkpoint a sandbox's processes to disk and free its memory (resume restores them)")
}
func (c *cli) resumeCmd() *cobra.Command {
	return c.lifecycleCmd("resume", "Thaw a paused sandbox (a stopped one is started)")
}

func (c *cli) lifecycleCmd(verb, short string) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " <id|name>",
		Short: short,
		Args:  args(1, 1, "one sandbox id or name"),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			id, err := resolve(cmd.Context(), cl, a[0])
			if err != nil {
				return err
			}
			var out any
			var sb *sandboxd.Sandbox
			switch verb {
			case "start":
				sb, err = cl.StartSandbox(cmd.Context(), id)
			case "stop":
				sb, err = cl.StopSandbox(cmd.Context(), id)
			case "pause":
				sb, err = cl.PauseSandbox(cmd.Context(), id)
			case "hibernate":
				var h *sandboxd.Hibernated
				if h, err = cl.HibernateSandbox(cmd.Context(), id); err == nil {
					sb, out = &h.Sandbox, h
					if h.Stopped {
						fmt.Fprintf(c.stderr, "%s stopped, not hibernated: %s\n", h.ID, h.StoppedReason)
					}
				}
			case "resume":
				var r *sandboxd.Resumed
				if r, err = cl.ResumeSandbox(cmd.Context(), id); err == nil {
					sb, out = &r.Sandbox, r
					if r.ProcessesRestarted {
						fmt.Fprintf(c.stderr, "%s was stopped, not paused: its processes restarted\n", r.ID)
					}
				}
			}
			if err != nil {
				return err
			}
			if out == nil {
				out = sb
			}
			if c.jsonOut {
				return c.printJSON(out)
			}
			fmt.Fprintln(c.stdout, sb.ID)
			return nil
		},
	}
}

func (c *cli) rmCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:     "rm [-f] <id|name>…",
		Aliases: []string{"destroy"},
		Short:   "Destroy sandboxes",
		Long: `Destroy sandboxes. Each argument is destroyed in turn; sbx goes on after
a failure and exits with the code of the first one. With --json it prints
{"deleted": [ids…]}.`,
		Args: args(1, -1, "at least one sandbox id or name"),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			return c.removeEach(a, force, func(ref string) error { return cl.DestroySandbox(cmd.Context(), ref) })
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "succeed when a sandbox does not exist")
	return cmd
}

// removeEach removes each ref in turn, going on after a failure, and
// returns the first failure (printing the others). It prints each ref
// removed, or with --json {"deleted": [refs…]}. With force, a ref that
// does not exist is skipped.
func (c *cli) removeEach(refs []string, force bool, remove func(ref string) error) error {
	deleted := []string{}
	var first error
	for _, ref := range refs {
		err := remove(ref)
		if force && errors.Is(err, sandboxd.ErrNotFound) {
			continue
		}
		if err != nil {
			if first == nil {
				first = err
			} else {
				fmt.Fprintln(c.stderr, "sbx: "+c.message(err))
			}
			continue
		}
		deleted = append(deleted, ref)
		if !c.jsonOut {
			fmt.Fprintln(c.stdout, ref)
		}
	}
	if c.jsonOut {
		if err := c.printJSON(map[string]any{"deleted": deleted}); err != nil {
			return err
		}
	}
	return first
}

// formatKV prints a map as sorted k=v pairs.
func formatKV(m map[string]string) string {
	kv := make([]string, 0, len(m))
	for k, v := range m {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *cli) networkCmd() *cobra.Command {
	var (
		allow, deny []string
		open        bool
	)
	cmd := &cobra.Command{
		Use:   "network <id|name> (--open | --allow CIDR|HOST…) [--deny CIDR…]",
		Short: "Change a sandbox's network policy (in force for its next connection)",
		Args:  args(1, 1, "a sandbox id or name"),
		RunE: func(cmd *cobra.Command, a []string) error {
			p := sandboxd.NetworkPolicy{Mode: sandboxd.NetworkRestricted, Allow: allow, Deny: deny}
			switch {
			case open && len(allow) > 0:
				return usagef(cmd, "--open allows everything but --deny: it takes no --allow")
			case open:
				p.Mode = sandboxd.NetworkOpen
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			sb, err := cl.SetNetworkPolicy(cmd.Context(), a[0], p)
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(sb)
			}
			fmt.Fprintln(c.stdout, sb.ID)
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&open, "open", false, "anywhere but --deny")
	f.StringSliceVar(&allow, "allow", nil, "only these CIDRs and host names (none: nothing but DNS)")
	f.StringSliceVar(&deny, "deny", nil, "CIDRs never reached")
	return cmd
}
