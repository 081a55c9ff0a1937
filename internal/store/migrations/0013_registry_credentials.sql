-- An owner's credential for one registry host (POST /v1/registries): the
-- user name in clear, the password or token sealed with the daemon's
-- keyring (associated data: owner and host), as secret env is. One per
-- owner and host; the host index answers "does anyone hold a credential
-- for this host?" (a create of an image from such a host re-checks the
-- caller's access before using the node's copy).
CREATE TABLE registry_credentials (
	owner         TEXT    NOT NULL CHECK (owner <> ''),
	host          TEXT    NOT NULL CHECK (host <> ''),
	username      TEXT    NOT NULL,
	sealed_secret BLOB    NOT NULL,
	created_at    INTEGER NOT NULL,
	PRIMARY KEY (owner, host)
);
CREATE INDEX registry_credentials_host ON registry_credentials (host);

-- A host any owner ever stored a credential for: its images stay private
-- (a create re-checks the caller's access) after the last credential is
-- deleted, since the node's copies pulled with one stay. Never deleted.
CREATE TABLE registry_private_hosts (
	host  TEXT    PRIMARY KEY CHECK (host <> ''),
	since INTEGER NOT NULL
);
