package main

import (
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

func (c *cli) portsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ports <id|name> | ports (ls|expose|rm) …",
		Short: "List, expose and unexpose sandbox ports",
		Args:  args(1, 1, "a sandbox id or name, or a subcommand"),
		RunE: func(cmd *cobra.Command, a []string) error {
			return c.listPorts(cmd, a[0])
		},
	}
	var (
		protocol string
		public   bool
	)
	expose := &cobra.Command{
		Use:     "expose <id|name> <port> [--protocol http|tcp|tls] [--public]",
		Aliases: []string{"add"},
		Short:   "Expose a sandbox port and print its URL",
		Args:    args(2, 2, "a sandbox id or name and a port"),
		RunE: func(cmd *cobra.Command, a []string) error {
			port, err := parsePort(cmd, a[1])
			if err != nil {
				return err
			}
			cl, id, err := c.clientFor(cmd, a[0])
			if err != nil {
				return err
			}
			p, err := cl.ExposePort(cmd.Context(), id, sandboxd.ExposePortRequest{
				Port: port, Protocol: sandboxd.Protocol(protocol), Public: public,
			})
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(p)
			}
			fmt.Fprintln(c.stdout, portAddress(*p))
			return nil
		},
	}
	expose.Flags().StringVar(&protocol, "protocol", "http", "http, tcp or tls")
	expose.Flags().BoolVar(&public, "public", false, "reachable without a token (required for tcp and tls, which carry none)")
	cmd.AddCommand(
		&cobra.Command{
			Use:     "ls <id|name>",
			Aliases: []string{"list"},
			Short:   "List the exposed ports of a sandbox",
			Args:    args(1, 1, "a sandbox id or name"),
			RunE:    func(cmd *cobra.Command, a []string) error { return c.listPorts(cmd, a[0]) },
		},
		expose,
		&cobra.Command{
			Use:     "rm <id|name> <port>",
			Aliases: []string{"unexpose"},
			Short:   "Stop exposing a sandbox port",
			Args:    args(2, 2, "a sandbox id or name and a port"),
			RunE: func(cmd *cobra.Command, a []string) error {
				port, err := parsePort(cmd, a[1])
				if err != nil {
					return err
				}
				cl, id, err := c.clientFor(cmd, a[0])
				if err != nil {
					return err
				}
				if err := cl.UnexposePort(cmd.Context(), id, port); err != nil {
					return err
				}
				if c.jsonOut {
					return c.printJSON(map[string]any{"sandbox_id": id, "port": port})
				}
				return nil
			},
		},
	)
	return cmd
}

func (c *cli) listPorts(cmd *cobra.Command, ref string) error {
	cl, id, err := c.clientFor(cmd, ref)
	if err != nil {
		return err
	}
	ports, err := cl.ListPorts(cmd.Context(), id)
	if err != nil {
		return err
	}
	if c.jsonOut {
		return c.printJSON(map[string]any{"items": nonNil(ports)})
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PORT\tPROTOCOL\tPUBLIC\tADDRESS")
	for _, p := range ports {
		fmt.Fprintf(tw, "%d\t%s\t%t\t%s\n", p.Port, p.Protocol, p.Public, portAddress(p))
	}
	return tw.Flush()
}

// portAddress is where an exposed port is reached.
func portAddress(p sandboxd.Port) string {
	if p.URL == "" && p.HostPort != 0 {
		return ":" + strconv.Itoa(p.HostPort)
	}
	return p.URL
}

func parsePort(cmd *cobra.Command, s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, usagef(cmd, "port %q: want 1 to 65535", s)
	}
	return n, nil
}

func (c *cli) domainsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "domains <id|name> | domains (ls|add|verify|rm) …",
		Short: "List, add, verify and remove custom domains of a sandbox",
		Args:  args(1, 1, "a sandbox id or name, or a subcommand"),
		RunE: func(cmd *cobra.Command, a []string) error {
			return c.listDomains(cmd, a[0])
		},
	}
	var port int
	add := &cobra.Command{
		Use:   "add <id|name> <hostname> --port PORT",
		Short: "Route a host name to a sandbox port",
		Args:  args(2, 2, "a sandbox id or name and a host name"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if port < 1 || port > 65535 {
				return usagef(cmd, "--port: want 1 to 65535")
			}
			cl, id, err := c.clientFor(cmd, a[0])
			if err != nil {
				return err
			}
			d, err := cl.AddDomain(cmd.Context(), id, a[1], port)
			if err != nil {
				return err
			}
			return c.printDomain(d)
		},
	}
	verify := &cobra.Command{
		Use:   "verify <id|name> <hostname>",
		Short: "Look up a pending domain's TXT record now; it routes once verified",
		Args:  args(2, 2, "a sandbox id or name and a host name"),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, id, err := c.clientFor(cmd, a[0])
			if err != nil {
				return err
			}
			d, err := cl.VerifyDomain(cmd.Context(), id, a[1])
			if err != nil {
				return err
			}
			return c.printDomain(d)
		},
	}
	add.Flags().IntVar(&port, "port", 0, "sandbox port to route to")
	cmd.AddCommand(
		&cobra.Command{
			Use:     "ls <id|name>",
			Aliases: []string{"list"},
			Short:   "List the custom domains of a sandbox",
			Args:    args(1, 1, "a sandbox id or name"),
			RunE:    func(cmd *cobra.Command, a []string) error { return c.listDomains(cmd, a[0]) },
		},
		add,
		verify,
		&cobra.Command{
			Use:     "rm <id|name> <hostname>",
			Aliases: []string{"remove"},
			Short:   "Remove a custom domain",
			Args:    args(2, 2, "a sandbox id or name and a host name"),
			RunE: func(cmd *cobra.Command, a []string) error {
				cl, id, err := c.clientFor(cmd, a[0])
				if err != nil {
					return err
				}
				if err := cl.RemoveDomain(cmd.Context(), id, a[1]); err != nil {
					return err
				}
				if c.jsonOut {
					return c.printJSON(map[string]any{"sandbox_id": id, "hostname": a[1]})
				}
				return nil
			},
		},
	)
	return cmd
}

func (c *cli) listDomains(cmd *cobra.Command, ref string) error {
	cl, id, err := c.clientFor(cmd, ref)
	if err != nil {
		return err
	}
	domains, err := cl.ListDomains(cmd.Context(), id)
	if err != nil {
		return err
	}
	if c.jsonOut {
		return c.printJSON(map[string]any{"items": nonNil(domains)})
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOSTNAME\tPORT\tVERIFIED")
	for _, d := range domains {
		fmt.Fprintf(tw, "%s\t%d\t%v\n", d.Hostname, d.Port, d.Verified)
	}
	return tw.Flush()
}

// printDomain prints a binding: its host name once verified, else the TXT
// record that would verify it (on stderr, stdout staying the host name).
func (c *cli) printDomain(d *sandboxd.Domain) error {
	if c.jsonOut {
		return c.printJSON(d)
	}
	fmt.Fprintln(c.stdout, d.Hostname)
	if !d.Verified {
		fmt.Fprintf(c.stderr, "pending: it routes once DNS has\n  %s TXT %q\n(then: sbx domains verify %s %s)\n",
			d.Verification.Name, d.Verification.Value, d.SandboxID, d.Hostname)
		if d.Verification.Error != "" {
			fmt.Fprintln(c.stderr, "last look-up:", d.Verification.Error)
		}
	}
	return nil
}

// clientFor returns a client and the id of the sandbox ref names.
func (c *cli) clientFor(cmd *cobra.Command, ref string) (*sandboxd.Client, string, error) {
	cl, err := c.client()
	if err != nil {
		return nil, "", err
	}
	id, err := resolve(cmd.Context(), cl, ref)
	return cl, id, err
}

// nonNil makes an empty list print as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
