package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

func (c *cli) poolCmd() *cobra.Command {
	list := func(cmd *cobra.Command, pools []sandboxd.Pool) error {
		if c.jsonOut {
			return c.printJSON(map[string]any{"pools": nonNil(pools)})
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "IMAGE\tRUNTIME\tCPU\tMEMORY\tNETWORK\tSIZE\tWINDOW\tTARGET\tREADY\tFILLING")
		for _, p := range pools {
			size, window := strconv.Itoa(p.Size), "-"
			if p.MaxSize > p.Size {
				size, window = fmt.Sprintf("%d-%d", p.Size, p.MaxSize), (time.Duration(p.WindowS) * time.Second).String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%g\t%d MB\t%v\t%s\t%s\t%d\t%d\t%d\n", p.Image, p.Runtime, p.CPU, p.MemoryMB, p.Network, size, window, p.Target, p.Ready, p.Filling)
		}
		return tw.Flush()
	}
	cmd := &cobra.Command{
		Use:   "pool [set IMAGE=N …]",
		Short: "Show or set the warm pool of idle sandboxes (admin)",
		Long: `Without a subcommand, lists the warm pool's classes: what it is set to keep
(SIZE, or MIN-MAX for a class whose size follows demand over WINDOW), what
it keeps now (TARGET) and holds (READY, FILLING). A create that matches a
class (image, runtime, CPU, memory, network) and mounts nothing is served
from it in milliseconds.`,
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
	var (
		class  sandboxd.Pool
		window time.Duration
	)
	set := &cobra.Command{
		Use:   "set IMAGE=N|IMAGE=MIN-MAX [IMAGE=… …] [--window D] [--cpu C] [--memory-mb M] [--runtime R] [--network]",
		Short: "Replace the pool's targets: N idle sandboxes of each IMAGE, or MIN to MAX following demand (no argument empties it)",
		Long: `Replaces the pool's targets. IMAGE=N keeps N idle sandboxes of IMAGE.
IMAGE=MIN-MAX keeps at least MIN and follows demand up to MAX: while creates
of the class find the pool empty within the window (--window, default 60s)
it grows to what the window asked for, and an idle sandbox that waits a
whole window unclaimed is given back, down to MIN. Growth never takes more
than half of the host's free CPU and memory budget.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, specs []string) error {
			if window < 0 || window%time.Second != 0 {
				return usagef(cmd, "--window %v: want whole seconds, such as 30s or 2m", window)
			}
			pools := []sandboxd.Pool{}
			for _, s := range specs {
				img, n, ok := strings.Cut(s, "=")
				lo, hi, ranged := strings.Cut(n, "-")
				size, err := strconv.Atoi(lo)
				maxSize := 0
				if ranged && err == nil {
					maxSize, err = strconv.Atoi(hi)
				}
				if !ok || img == "" || err != nil || size < 0 || (ranged && maxSize <= size) {
					return usagef(cmd, "%q: want IMAGE=N, or IMAGE=MIN-MAX with MIN below MAX", s)
				}
				p := class
				p.Image, p.Size, p.MaxSize = img, size, maxSize
				if ranged {
					p.WindowS = int(window / time.Second)
				} else if window != 0 {
					return usagef(cmd, "--window applies to IMAGE=MIN-MAX only (%q has a fixed size)", s)
				}
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
	set.Flags().DurationVar(&window, "window", 0, "for IMAGE=MIN-MAX: how far back demand counts, and how long an idle sandbox waits before it is given back (default: the daemon's, 60s)")
	cmd.AddCommand(set)
	return cmd
}
