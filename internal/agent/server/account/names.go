package account

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Names maps numeric owner and group ids to names, as ls does. Build one per
// request with [Directory.Names]; it is a snapshot and not safe for
// concurrent use.
type Names struct {
	users  map[uint32]string
	groups map[uint32]string
}

// Names reads the passwd file and the group file beside it (the "group"
// file in the same directory, so /etc/group for /etc/passwd). Unreadable
// files give an empty mapping: ids then print as numbers.
func (d *Directory) Names() *Names {
	return &Names{
		users:  readIDNames(d.path, 2),
		groups: readIDNames(filepath.Join(filepath.Dir(d.path), "group"), 2),
	}
}

// User returns the name of uid, or uid in decimal if it has none.
func (n *Names) User(uid uint32) string { return nameOr(n.users, uid) }

// Group returns the name of gid, or gid in decimal if it has none.
func (n *Names) Group(gid uint32) string { return nameOr(n.groups, gid) }

func nameOr(m map[uint32]string, id uint32) string {
	if name, ok := m[id]; ok {
		return name
	}
	return strconv.FormatUint(uint64(id), 10)
}

// readIDNames maps field idField to field 0 of a colon-separated
// passwd(5)/group(5) file. The first name of an id wins, as in getpwuid.
func readIDNames(path string, idField int) map[uint32]string {
	m := make(map[uint32]string)
	f, err := os.Open(path)
	if err != nil {
		return m
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		fields := strings.Split(line, ":")
		if len(fields) <= idField || fields[0] == "" {
			continue
		}
		id, err := strconv.ParseUint(fields[idField], 10, 32)
		if err != nil {
			continue
		}
		if _, dup := m[uint32(id)]; !dup {
			m[uint32(id)] = fields[0]
		}
	}
	return m
}
