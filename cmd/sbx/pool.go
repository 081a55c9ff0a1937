package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

func (c *cli) poolCmd() *cobra.Command {
	list := func(cmd *cobra.Command, pools []sandboxd.Pool) error {
		if c.jsonOut {
			return c.printJSON(map[string]any{"pools": nonNil(pools)})
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "IMAGE\tRUNTIME\tCPU\tMEMORY\tNETWORK\tSIZE\tREADY\tFILLING")
		for _, p := range pools {
			fmt.Fprintf(tw, "%s\t%s\t%g\t%d MB\t%v\t%d\t%d\t%d\n", p.Image, p.Runtime, p.CPU, p.MemoryMB, p.Network, p.Size, p.Ready, p.Filling)
		}
		return tw.Flush()
	}
	cmd := &cobra.Command{
		Use:   "pool [set IMAGE=N …]",
		Short: "Show or set the warm pool of idle sandboxes (admin)",
		Long: `Without a subcommand, lists the warm pool's classes: what it keeps (SIZE)
and holds (READY, FILLING). A create that matches a class (image, runtime,
CPU, memory, network) and mounts nothing is served from it in milliseconds.`,
		Args: args(0, 0, "no arguments (or the subcommand set)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			pools, err := cl.ListPools(cmd.Context())
			if err != nil {
				return err
			}
			return list(cmd, pools)
		},
	}
	var class sandboxd.Pool
	set := &cobra.Command{
		Use:   "set IMAGE=N [IMAGE=N …] [--cpu C] [--memory-mb M] [--runtime R] [--network]",
		Short: "Replace the pool's targets: N idle sandboxes of each IMAGE (no argument empties it)",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, specs []string) error {
			pools := []sandboxd.Pool{}
			for _, s := range specs {
				img, n, ok := strings.Cut(s, "=")
				size, err := strconv.Atoi(n)
				if !ok || img == "" || err != nil || size < 0 {
					return usagef(cmd, "%q: want IMAGE=N", s)
				}
				p := class
				p.Image, p.Size = img, size
				pools = append(pools, p)
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			got, err := cl.SetPools(cmd.Context(), pools)
			if err != nil {
				return err
			}
			return list(cmd, got)
		},
	}
	set.Flags().Float64Var(&class.CPU, "cpu", 0, "CPU cores of each class (default: a create's)")
	set.Flags().Int64Var(&class.MemoryMB, "memory-mb", 0, "memory of each class in MB (default: a create's)")
	set.Flags().Int64Var(&class.DiskMB, "disk-mb", 0, "disk limit of each class in MiB (default: a create's)")
	set.Flags().StringVar(&class.Runtime, "runtime", "", "docker or gvisor (default: the daemon's)")
	set.Flags().BoolVar(&class.Network, "network", false, "classes of sandboxes with network")
	cmd.AddCommand(set)
	return cmd
}
