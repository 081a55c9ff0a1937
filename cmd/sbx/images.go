package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// imagesCmd is `sbx images REF…`: what the node has of each image.
func (c *cli) imagesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "images REF [REF…]",
		Short: "Show whether the node has each image, or how far its pull is",
		Args:  args(1, -1, "one or more image references"),
		RunE: func(cmd *cobra.Command, refs []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			var imgs []*sandboxd.Image
			for _, ref := range refs {
				img, err := cl.GetImage(cmd.Context(), ref)
				if err != nil {
					return err
				}
				imgs = append(imgs, img)
			}
			if c.jsonOut {
				return c.printJSON(map[string]any{"items": imgs})
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "IMAGE\tSTATE\tSIZE")
			for _, img := range imgs {
				state, size := "absent", ""
				switch {
				case img.Pulling:
					state = "pulling " + progress(img)
				case img.Present:
					state, size = "present", mb(img.SizeBytes)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", img.Ref, state, size)
			}
			return tw.Flush()
		},
	}
}

// pullCmd is `sbx pull REF`: the node pulls the image (or joins the pull
// under way), with a progress line on stderr.
func (c *cli) pullCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pull REF",
		Short: "Make the node pull an image (what a create of it does first)",
		Args:  args(1, 1, "an image reference"),
		RunE: func(cmd *cobra.Command, a []string) error {
			ref := a[0]
			cl, err := c.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			type result struct {
				img *sandboxd.Image
				err error
			}
			done := make(chan result, 1)
			go func() {
				img, err := cl.PullImage(ctx, ref)
				done <- result{img, err}
			}()
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			shown := false
			for {
				select {
				case r := <-done:
					if shown {
						fmt.Fprintln(c.stderr)
					}
					if r.err != nil {
						return r.err
					}
					if c.jsonOut {
						return c.printJSON(r.img)
					}
					fmt.Fprintf(c.stdout, "%s: present, %s\n", r.img.Ref, mb(r.img.SizeBytes))
					return nil
				case <-tick.C:
					img, err := cl.GetImage(ctx, ref)
					if err == nil && img.Pulling {
						fmt.Fprintf(c.stderr, "\rpulling %s: %s", img.Ref, progress(img))
						shown = true
					}
				}
			}
		},
	}
}

func progress(img *sandboxd.Image) string {
	if img.BytesTotal <= 0 {
		return "starting"
	}
	return fmt.Sprintf("%s of %s", mb(img.BytesDone), mb(img.BytesTotal))
}

func mb(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }
