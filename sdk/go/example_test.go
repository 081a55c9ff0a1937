package sandboxd_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// Create a sandbox, run a command in it, and destroy it.
func Example() {
	ctx := context.Background()
	c := sandboxd.New(sandboxd.DefaultBaseURL, os.Getenv("SBX_TOKEN"))

	sb, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{
		Image:   "sandboxd/base:bookworm",
		Tags:    map[string]string{"job": "example"},
		Timeout: 10 * time.Minute,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.DestroySandbox(context.WithoutCancel(ctx), sb.ID)

	res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Cmd: []string{"uname", "-a"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("exit %d: %s", res.ExitCode, res.Stdout)
}

// Stream a command's output as it runs, feeding it standard input.
func ExampleClient_ExecStream() {
	ctx := context.Background()
	c := sandboxd.New(sandboxd.DefaultBaseURL, os.Getenv("SBX_TOKEN"))

	p, err := c.ExecStream(ctx, "sb-0123456789abcdef", sandboxd.StreamRequest{
		Command: "tr a-z A-Z",
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	fmt.Fprintln(p, "hello")
	p.CloseStdin()
	code, err := p.Wait()
	if err != nil {
		log.Fatal(err)
	}
	os.Exit(code)
}

// Walk every sandbox carrying a tag, page by page.
func ExampleClient_AllSandboxes() {
	ctx := context.Background()
	c := sandboxd.New(sandboxd.DefaultBaseURL, os.Getenv("SBX_TOKEN"))

	for sb, err := range c.AllSandboxes(ctx, sandboxd.ListOptions{Tags: map[string]string{"job": "ci"}}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(sb.ID, sb.State)
	}
}

// Tell error codes apart with errors.Is, and read details with errors.As.
func ExampleAPIError() {
	ctx := context.Background()
	c := sandboxd.New(sandboxd.DefaultBaseURL, os.Getenv("SBX_TOKEN"))

	_, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Name: "web"})
	var apiErr *sandboxd.APIError
	switch {
	case errors.Is(err, sandboxd.ErrNameConflict):
		fmt.Println("a sandbox named web already exists")
	case errors.As(err, &apiErr) && apiErr.Code == sandboxd.CodeCapacityExhausted:
		fmt.Println("host full; try again in", apiErr.RetryAfter)
	case err != nil:
		log.Fatal(err)
	}
}
