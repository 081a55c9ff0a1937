package adversarial_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// tarEntry is one header of a hostile archive.
type tarEntry struct {
	name string
	typ  byte
	link string
	mode int64
	body string
}

func hostileTar(t *testing.T, es ...tarEntry) *bytes.Reader {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		if e.mode == 0 {
			e.mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if e.typ == tar.TypeChar {
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil && h.Size > 0 {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(b.Bytes())
}

// An archive uploaded through the API (PUT /v1/sandboxes/{id}/files/archive)
// is hostile: each of these would, unpacked naively by the agent (root,
// PID 1), write outside the destination, through a link the sandbox
// planted, or make a device or a setuid binary. Each is refused with
// invalid_argument (the setuid bit is dropped), and nothing appears where
// it aimed.
func TestArchive_HostileUploadsAreRefused(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "archive-hostile")
	c := tenant(t, d, "archiver")
	sb := sandbox(t, c, sandboxd.CreateRequest{})
	// The sandbox plants links in the destination, as code in it could.
	if r := sh(t, c, sb.ID, "mkdir -p /tmp/dst && ln -s /etc /tmp/dst/etc && ln -s /etc/passwd /tmp/dst/pw && echo ok"); r.Stdout != "ok\n" {
		t.Fatalf("plant links: %+v", r)
	}
	cases := []struct {
		name    string
		entries []tarEntry
		// gone is a shell test that must fail afterwards (nothing made).
		gone string
	}{
		{"absolute", []tarEntry{{name: "/etc/sbx-abs", typ: tar.TypeReg, body: "x"}}, "test -e /etc/sbx-abs"},
		{"dotdot", []tarEntry{{name: "../../etc/sbx-dotdot", typ: tar.TypeReg, body: "x"}}, "test -e /etc/sbx-dotdot"},
		{"through a planted link", []tarEntry{{name: "etc/sbx-planted", typ: tar.TypeReg, body: "x"}}, "test -e /etc/sbx-planted"},
		{"through its own link", []tarEntry{
			{name: "own", typ: tar.TypeSymlink, link: "/etc"},
			{name: "own/sbx-own", typ: tar.TypeReg, body: "x"},
		}, "test -e /etc/sbx-own"},
		{"hard link out", []tarEntry{{name: "shadow", typ: tar.TypeLink, link: "../../etc/shadow"}}, "test -e /tmp/dst/shadow"},
		{"hard link through a planted link", []tarEntry{{name: "hl", typ: tar.TypeLink, link: "etc/passwd"}}, "test -e /tmp/dst/hl"},
		{"device node", []tarEntry{{name: "mem", typ: tar.TypeChar}}, "test -e /tmp/dst/mem"},
	}
	for _, tc := range cases {
		err := c.UploadArchive(t.Context(), sb.ID, "/tmp/dst", hostileTar(t, tc.entries...))
		if !errors.Is(err, sandboxd.ErrInvalidArgument) {
			t.Errorf("%s: %v, want invalid_argument", tc.name, err)
		}
		if r := sh(t, c, sb.ID, tc.gone); r.ExitCode == 0 {
			t.Errorf("%s: `%s` holds: the archive got through", tc.name, tc.gone)
		}
	}
	// A file written over the planted link replaces the link, never
	// what it points to.
	if err := c.UploadArchive(t.Context(), sb.ID, "/tmp/dst", hostileTar(t, tarEntry{name: "pw", typ: tar.TypeReg, body: "pwned\n"})); err != nil {
		t.Fatalf("a file over a planted link: %v", err)
	}
	if r := sh(t, c, sb.ID, "head -c 5 /etc/passwd; echo; cat /tmp/dst/pw"); !strings.HasPrefix(r.Stdout, "root:") || !strings.HasSuffix(r.Stdout, "pwned\n") {
		t.Errorf("after writing over /tmp/dst/pw -> /etc/passwd: %q; want /etc/passwd untouched and the file in the link's place", r.Stdout)
	}
	// Setuid and setgid are dropped.
	if err := c.UploadArchive(t.Context(), sb.ID, "/tmp/dst", hostileTar(t, tarEntry{name: "suid", typ: tar.TypeReg, mode: 0o6755, body: "#!/bin/sh\n"})); err != nil {
		t.Fatalf("a setuid file: %v", err)
	}
	if r := sh(t, c, sb.ID, "stat -c %a /tmp/dst/suid"); r.Stdout != "755\n" {
		t.Errorf("a 6755 file unpacked with mode %q, want 755", r.Stdout)
	}
	// Another tenant cannot reach the sandbox at all.
	other := tenant(t, d, "other")
	if err := other.UploadArchive(t.Context(), sb.ID, "/tmp/dst", hostileTar(t, tarEntry{name: "x", typ: tar.TypeReg, body: "x"})); !isNotFound(err) {
		t.Errorf("another tenant's upload: %v, want not_found", err)
	}
	if _, err := other.DownloadArchive(t.Context(), sb.ID, "/tmp/dst"); !isNotFound(err) {
		t.Errorf("another tenant's download: %v, want not_found", err)
	}
}

// An archive past the sandbox's disk limit fails with disk_full (507),
// as a plain upload does, and the sandbox keeps working.
func TestArchive_PastTheDiskLimitIsDiskFull(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "archive-disk")
	c := tenant(t, d, "filler")
	sb := sandbox(t, c, sandboxd.CreateRequest{DiskMB: 32})
	driver, _ := engineDisk(t)
	needsEnforcement(t, sb, driver)

	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: "big.bin", Typeflag: tar.TypeReg, Mode: 0o644, Size: 128 * mib})
		if err == nil {
			_, err = io.Copy(tw, io.LimitReader(zeros{}, 128*mib))
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	err := c.UploadArchive(t.Context(), sb.ID, "/tmp/fill", pr)
	pr.Close()
	var apiErr *sandboxd.APIError
	if !errors.Is(err, sandboxd.ErrDiskFull) || !errors.As(err, &apiErr) || apiErr.Status != 507 {
		t.Fatalf("an archive of 128 MiB into a 32 MiB sandbox: %v, want 507 disk_full", err)
	}
	if r := sh(t, c, sb.ID, "rm -rf /tmp/fill; echo small > /tmp/ok && cat /tmp/ok"); r.Stdout != "small\n" {
		t.Errorf("after the refused archive the sandbox cannot write: %+v", r)
	}
}

// sizedZeros is n zero bytes with a Len, so the SDK sends a
// Content-Length, the daemon passes it on, and the agent splices the body
// from its socket into the file.
type sizedZeros struct{ left int }

func (z *sizedZeros) Read(p []byte) (int, error) {
	if z.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), z.left)
	clear(p[:n])
	z.left -= n
	return n, nil
}

func (z *sizedZeros) Len() int { return z.left }

// An upload of known length past the disk limit (the agent's spliced
// path) is disk_full (507) like a chunked one, and the sandbox's agent
// keeps answering.
func TestDisk_SizedUploadPastTheLimitIsDiskFull(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "disk-sized")
	c := tenant(t, d, "sized")
	sb := sandbox(t, c, sandboxd.CreateRequest{DiskMB: 32})
	driver, _ := engineDisk(t)
	needsEnforcement(t, sb, driver)

	err := c.UploadFile(t.Context(), sb.ID, "/tmp/big.bin", &sizedZeros{left: 128 * mib})
	var apiErr *sandboxd.APIError
	if !errors.Is(err, sandboxd.ErrDiskFull) || !errors.As(err, &apiErr) || apiErr.Status != 507 {
		t.Fatalf("a sized upload of 128 MiB into a 32 MiB sandbox: %v, want 507 disk_full", err)
	}
	if r := sh(t, c, sb.ID, "rm -f /tmp/big.bin; echo small > /tmp/ok && cat /tmp/ok"); r.Stdout != "small\n" {
		t.Errorf("after the refused upload the sandbox cannot write: %+v", r)
	}
	if err := c.UploadFile(t.Context(), sb.ID, "/tmp/fits.bin", &sizedZeros{left: 4 * mib}); err != nil {
		t.Errorf("a sized upload within the limit: %v", err)
	}
}
