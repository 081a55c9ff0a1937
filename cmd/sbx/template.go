package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

func (c *cli) templateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "template",
		Short: "Build, list and remove templates (sandbox images made from a recipe or a snapshot)",
		Args:  args(0, 0, "a subcommand: build, ls, rm, tag or untag"),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(c.templateBuildCmd(), c.templateLsCmd(), c.templateRmCmd(), c.templateTagCmd(), c.templateUntagCmd())
	return cmd
}

func (c *cli) templateBuildCmd() *cobra.Command {
	var (
		file   string
		detach bool
	)
	cmd := &cobra.Command{
		Use:   "build -f RECIPE.json [--detach]",
		Short: "Build a template from a recipe and print its id",
		Long: `Build a template from a recipe (a JSON file, or - for stdin):

  {"name": "py", "base": "python:3.12-alpine",
   "steps": [{"run": "pip install requests"}, {"workdir": "/app"},
             {"copy": {"path": "/app/main.py", "content": "<base64>"}}],
   "start_cmd": "python main.py", "ready_cmd": "wget -qO- localhost:8000"}

Each step sets exactly one of run, copy, env, workdir and user. The build's
output streams to stderr until it ends; --detach prints the id at once. The
same recipe over the same base again is the template already built
("no_cache": true builds anyway). Once built, name:tag points to it for
each of "tags" (default latest), moved from the build it pointed to;
"from_template" builds over another of your templates. A failed build exits
1 with its error.`,
		Args: args(0, 0, "no arguments (the recipe is -f FILE)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usagef(cmd, "-f RECIPE.json is required")
			}
			recipe, err := c.readRecipe(cmd, file)
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			t, err := cl.BuildTemplate(ctx, recipe)
			if err != nil {
				return err
			}
			if t.Cached {
				fmt.Fprintf(c.stderr, "%s: the same recipe was built already\n", t.ID)
			}
			if !detach && t.State == sandboxd.TemplateBuilding {
				if err := cl.TemplateLogs(ctx, t.ID, c.stderr); err != nil {
					return err
				}
				if t, err = cl.GetTemplate(ctx, t.ID); err != nil {
					return err
				}
			}
			if err := c.printTemplate(t); err != nil {
				return err
			}
			if t.State == sandboxd.TemplateFailed {
				return fmt.Errorf("the build of %s failed: %s", t.ID, t.Error)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the recipe, a JSON file (- for stdin)")
	cmd.Flags().BoolVarP(&detach, "detach", "d", false, "print the template's id without following its build")
	return cmd
}

// readRecipe reads a recipe from file ("-": stdin), strictly: a field the
// recipe does not have is a usage error here, not dropped on the way.
func (c *cli) readRecipe(cmd *cobra.Command, file string) (sandboxd.Recipe, error) {
	var (
		b   []byte
		err error
	)
	if file == "-" {
		b, err = io.ReadAll(c.stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return sandboxd.Recipe{}, fmt.Errorf("read the recipe: %w", err)
	}
	var r sandboxd.Recipe
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return sandboxd.Recipe{}, usagef(cmd, "recipe %s: %v", file, err)
	}
	return r, nil
}

// printTemplate prints a template's id, or with --json the template.
func (c *cli) printTemplate(t *sandboxd.Template) error {
	if c.jsonOut {
		return c.printJSON(t)
	}
	fmt.Fprintln(c.stdout, t.ID)
	return nil
}

func (c *cli) templateLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List templates and snapshots",
		Args:    args(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			ts, err := cl.ListTemplates(cmd.Context())
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(map[string]any{"items": nonNil(ts)})
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tTAGS\tKIND\tSTATE\tSIZE\tCREATED")
			for _, t := range ts {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d MB\t%s\n", t.ID, orDash(t.Name), orDash(strings.Join(t.Tags, ",")), t.Kind, t.State,
					t.SizeBytes>>20, t.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
}

func (c *cli) templateRmCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "rm [-f] <id|name>…",
		Short: "Remove templates (not while a sandbox made from one exists)",
		Args:  args(1, -1, "at least one template id or name"),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			return c.removeEach(a, force, func(ref string) error { return cl.DeleteTemplate(cmd.Context(), ref) })
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "succeed when a template does not exist")
	return cmd
}

func (c *cli) templateTagCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "tag TEMPLATE NAME:TAG...",
		Short: "Point NAME:TAG at a template (an id or name[:tag]), moving the tag if it pointed elsewhere",
		Args:  args(2, -1, "a template and at least one NAME:TAG"),
		RunE: func(cmd *cobra.Command, a []string) error {
			byName := map[string][]string{}
			var names []string
			for _, ref := range a[1:] {
				name, tag, ok := strings.Cut(ref, ":")
				if !ok || name == "" || tag == "" {
					return usagef(cmd, "%q is not NAME:TAG", ref)
				}
				if byName[name] == nil {
					names = append(names, name)
				}
				byName[name] = append(byName[name], tag)
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			var t *sandboxd.Template
			for _, name := range names {
				if t, err = cl.TagTemplate(cmd.Context(), a[0], name, byName[name]...); err != nil {
					return err
				}
			}
			return c.printTemplate(t)
		},
	}
}

func (c *cli) templateUntagCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "untag NAME:TAG...",
		Short: "Remove tags (the templates they pointed to stay, by their ids)",
		Args:  args(1, -1, "at least one NAME:TAG"),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			return c.removeEach(a, force, func(ref string) error {
				name, tag, ok := strings.Cut(ref, ":")
				if !ok || name == "" || tag == "" {
					return fmt.Errorf("%q is not NAME:TAG", ref)
				}
				return cl.UntagTemplate(cmd.Context(), name, tag)
			})
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "succeed when a tag does not exist")
	return cmd
}

func (c *cli) snapshotCmd() *cobra.Command {
	var (
		name   string
		memory bool
	)
	cmd := &cobra.Command{
		Use:   "snapshot <id|name> [--name NAME] [--memory]",
		Short: "Capture a sandbox's filesystem as a template and print its id",
		Long: `Capture a sandbox's filesystem (running, paused or stopped) as a template
that 'sbx create --template' creates from. Its env is captured; its secret
env, agent token and processes are not.

With --memory, the running sandbox's processes and memory are captured too
(its secret env with them, sealed): every sandbox created from the snapshot
starts with them where they were, with the source's runtime and size. The
sandbox pauses for the checkpoint and runs on. Only gVisor sandboxes of an
--engine oci daemon can; the snapshot stays on the node that took it.`,
		Args: args(1, 1, "one sandbox id or name"),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			id, err := resolve(cmd.Context(), cl, a[0])
			if err != nil {
				return err
			}
			snapshot := cl.Snapshot
			if memory {
				snapshot = cl.SnapshotWithMemory
			}
			t, err := snapshot(cmd.Context(), id, name)
			if err != nil {
				return err
			}
			return c.printTemplate(t)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "name of the snapshot (a DNS label)")
	cmd.Flags().BoolVar(&memory, "memory", false, "capture the sandbox's running processes and memory too")
	return cmd
}

func (c *cli) forkCmd() *cobra.Command {
	var (
		n      int
		memory bool
	)
	cmd := &cobra.Command{
		Use:   "fork <id|name> [-n N] [--memory]",
		Short: "Make N sandboxes (default 1) from a sandbox's current filesystem and print their ids",
		Long: `Make N sandboxes (1 to 16) from a sandbox's current filesystem, with its
size, env, secret env, tags, network and runtime; each has its own id and
SSH key (--json prints them). All or none. With --memory each starts with
a copy of the running sandbox's processes and memory (gVisor sandboxes on
--engine oci).`,
		Args: args(1, 1, "one sandbox id or name"),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			id, err := resolve(cmd.Context(), cl, a[0])
			if err != nil {
				return err
			}
			fork := cl.Fork
			if memory {
				fork = cl.ForkWithMemory
			}
			sbs, err := fork(cmd.Context(), id, n)
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(map[string]any{"sandboxes": nonNil(sbs)})
			}
			for _, sb := range sbs {
				fmt.Fprintln(c.stdout, sb.ID)
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&n, "count", "n", 1, "how many sandboxes")
	cmd.Flags().BoolVar(&memory, "memory", false, "start each with a copy of the sandbox's running processes and memory")
	return cmd
}
