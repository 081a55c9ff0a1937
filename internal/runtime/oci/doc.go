// Package oci implements runtime.Runtime with an OCI runtime binary
// (crun, else runc; runsc for gVisor) run directly, without the Docker
// engine on any call about a sandbox: `sandboxd --engine oci`. The engine
// still holds the images (pull, build, commit); the first create of an
// image unpacks it once (image.go, untar.go); CollectImages removes the
// unpacked images nothing uses any more (imagegc.go).
//
// On disk, under Options.Dir:
//
//	images/<id>/               an image's root file system (read-only lower dir)
//	images/<id>.json           what of its configuration a sandbox takes
//	sandboxes/<id>/meta.json   what the sandbox was created as (node, labels, image, address, binary)
//	sandboxes/<id>/state.json  its current or last run (agent pid and start time, exit code)
//	sandboxes/<id>/config.json its OCI bundle's configuration (bundle.go)
//	sandboxes/<id>/agent.token its agent token (0600), handed to the agent at each boot (boot.go)
//	sandboxes/<id>/rootfs/     the overlay of the image and rw/upper (mounted while it exists)
//	sandboxes/<id>/rw/         a btrfs subvolume whose qgroup limit is the disk limit (disk.go):
//	                           upper/, work/, etc/{hosts,hostname,resolv.conf}, output.log
//	state/<binary>/            the OCI runtime's own state (its --root)
//
// Everything a sandbox is can be found from these files, the OCI
// runtime's state, /proc and the cgroup tree: a daemon killed with
// SIGKILL leaves its sandboxes running, and the next finds them
// (ListOurs), reaches their agents and removes them. A create that fails
// at any step, and Destroy, remove whatever of the sandbox exists
// (oci.go's remove), each step treating "not there" as done.
//
// Nothing per sandbox runs on the host but the sandbox's own processes:
// the OCI runtime exits after `run --detach`, and this process, a child
// subreaper, becomes the agent's parent and records its exit (boot.go).
// Networked sandboxes get a namespace and a veth on the daemon's sandbox
// bridge, under the same firewall as the engine's (network.go).
//
// A gVisor sandbox can be checkpointed into a directory the caller names
// and restored from it, on the same bundle (checkpoint.go); state.json then
// says checkpointed until the next run.
package oci
