package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The cluster's template catalog: every node's templates (builds and
// snapshots, never forks' captures) that every node may create from.
//
//	templates/r/<id>                      TemplateRecord (JSON)
//	templates/t/<owner>/<name>/<tag>      the id name:tag points to
//	templates/h/<id>/<node>               node holds the template's image
//	templates/u/<id>/<sandbox>            a placement made from it (ClaimPlacement)
//
// One prefix, one watch: a node sees a record before the tags that point
// to it, in the order etcd committed them. The node that makes a template
// publishes it (PutTemplate, then its tags) before it reports it ready;
// any node may tag, untag or delete it. Every node keeps a copy of the
// catalog in its own store (the service's mirror, fed by FollowTemplates)
// and pulls a template's image from the cluster's registry the first time
// it creates from it, then says it holds it (HoldTemplate), which is what
// placement prefers.

const (
	templatesPrefix  = prefix + "templates/"
	tplRecordPrefix  = templatesPrefix + "r/"
	tplTagPrefix     = templatesPrefix + "t/"
	tplHolderPrefix  = templatesPrefix + "h/"
	tplUsePrefix     = templatesPrefix + "u/"
	maxTemplateValue = 512 << 10 // a record's JSON (etcd takes 1.5 MiB a request)
)

// TemplateRecord is what the catalog keeps of one template.
type TemplateRecord struct {
	ID         string          `json:"id"`
	Owner      string          `json:"owner"`
	Name       string          `json:"name,omitempty"`
	Kind       string          `json:"kind"`
	BaseImage  string          `json:"base_image,omitempty"`
	SourceID   string          `json:"source_id,omitempty"`
	RecipeHash string          `json:"recipe_hash,omitempty"`
	Spec       json.RawMessage `json:"spec,omitempty"`
	SizeBytes  int64           `json:"size_bytes"`
	CreatedAt  time.Time       `json:"created_at"`
	// Node made it, and holds its image.
	Node string `json:"node"`
	// Image is the template's image in the cluster's registry, by digest
	// ("host/repo@sha256:…"); "" when the cluster has no registry (then
	// only Node can create from it).
	Image string `json:"image,omitempty"`
}

// TemplateTag is one name:tag of an owner's, pointing to template ID.
type TemplateTag struct {
	Owner, Name, Tag, ID string
}

func tplRecordKey(id string) string { return tplRecordPrefix + id }

func tplTagKey(owner, name, tag string) string {
	return tplTagPrefix + url.PathEscape(owner) + "/" + url.PathEscape(name) + "/" + url.PathEscape(tag)
}

func tplOwnerTags(owner string) string { return tplTagPrefix + url.PathEscape(owner) + "/" }

func tplHolderKey(id, node string) string { return tplHolderPrefix + id + "/" + node }

func tplUseKey(id, sandbox string) string { return tplUsePrefix + id + "/" + sandbox }

// TemplateEvents receives the catalog as this node's watch sees it, in
// etcd's order, from one goroutine. Reset hands the whole catalog (at the
// start and whenever the watch is replaced); the others one change each.
type TemplateEvents interface {
	ResetTemplates(recs []TemplateRecord, tags []TemplateTag)
	TemplatePut(rec TemplateRecord)
	TemplateDeleted(id string)
	TagPut(t TemplateTag)
	TagDeleted(owner, name, tag string)
}

// templateDir is the node's copy of templates/: the records (their
// makers and images) and which nodes hold each.
type templateDir struct {
	records map[string]TemplateRecord
	holders map[string]map[string]bool
}

// FollowTemplates reads the catalog, hands it to h.ResetTemplates and
// starts the watch that hands h every later change, until the node
// closes. Call it once.
func (n *Node) FollowTemplates(ctx context.Context, h TemplateEvents) error {
	reset := func(kvs []*kv) {
		dir := templateDir{records: map[string]TemplateRecord{}, holders: map[string]map[string]bool{}}
		var tags []TemplateTag
		for _, kv := range kvs {
			switch k := string(kv.Key); {
			case strings.HasPrefix(k, tplRecordPrefix):
				if r, ok := n.decodeTemplate(kv); ok {
					dir.records[r.ID] = r
				}
			case strings.HasPrefix(k, tplTagPrefix):
				if t, ok := decodeTag(kv); ok {
					tags = append(tags, t)
				}
			case strings.HasPrefix(k, tplHolderPrefix):
				if id, node, ok := decodeHolder(k); ok {
					if dir.holders[id] == nil {
						dir.holders[id] = map[string]bool{}
					}
					dir.holders[id][node] = true
				}
			}
		}
		n.dirMu.Lock()
		n.templates = dir
		n.dirMu.Unlock()
		recs := make([]TemplateRecord, 0, len(dir.records))
		for _, r := range dir.records {
			recs = append(recs, r)
		}
		slices.SortFunc(recs, func(a, b TemplateRecord) int { return a.CreatedAt.Compare(b.CreatedAt) })
		h.ResetTemplates(recs, tags)
	}
	apply := func(kv *kv, deleted bool) {
		switch k := string(kv.Key); {
		case strings.HasPrefix(k, tplRecordPrefix):
			id := strings.TrimPrefix(k, tplRecordPrefix)
			if deleted {
				n.dirMu.Lock()
				delete(n.templates.records, id)
				delete(n.templates.holders, id)
				n.dirMu.Unlock()
				h.TemplateDeleted(id)
				return
			}
			if r, ok := n.decodeTemplate(kv); ok {
				n.dirMu.Lock()
				n.templates.records[r.ID] = r
				n.dirMu.Unlock()
				h.TemplatePut(r)
			}
		case strings.HasPrefix(k, tplTagPrefix):
			if deleted {
				if owner, name, tag, ok := splitTagKey(k); ok {
					h.TagDeleted(owner, name, tag)
				}
				return
			}
			if t, ok := decodeTag(kv); ok {
				h.TagPut(t)
			}
		case strings.HasPrefix(k, tplHolderPrefix):
			id, node, ok := decodeHolder(k)
			if !ok {
				return
			}
			n.dirMu.Lock()
			if deleted {
				delete(n.templates.holders[id], node)
			} else {
				if n.templates.holders[id] == nil {
					n.templates.holders[id] = map[string]bool{}
				}
				n.templates.holders[id][node] = true
			}
			n.dirMu.Unlock()
		}
	}
	rev, err := n.load(ctx, templatesPrefix, reset)
	if err != nil {
		return err
	}
	n.wg.Go(func() { n.follow(templatesPrefix, rev, reset, apply) })
	return nil
}

func (n *Node) decodeTemplate(kv *kv) (TemplateRecord, bool) {
	var r TemplateRecord
	if err := json.Unmarshal(kv.Value, &r); err != nil || r.ID != strings.TrimPrefix(string(kv.Key), tplRecordPrefix) {
		n.log.Warn("cluster: undecodable template record", "key", string(kv.Key), "err", err)
		return TemplateRecord{}, false
	}
	return r, true
}

func splitTagKey(k string) (owner, name, tag string, ok bool) {
	parts := strings.Split(strings.TrimPrefix(k, tplTagPrefix), "/")
	if len(parts) != 3 {
		return "", "", "", false
	}
	var err1, err2, err3 error
	owner, err1 = url.PathUnescape(parts[0])
	name, err2 = url.PathUnescape(parts[1])
	tag, err3 = url.PathUnescape(parts[2])
	return owner, name, tag, err1 == nil && err2 == nil && err3 == nil
}

func decodeTag(kv *kv) (TemplateTag, bool) {
	owner, name, tag, ok := splitTagKey(string(kv.Key))
	if !ok {
		return TemplateTag{}, false
	}
	return TemplateTag{Owner: owner, Name: name, Tag: tag, ID: string(kv.Value)}, true
}

func decodeHolder(k string) (id, node string, ok bool) {
	id, node, ok = strings.Cut(strings.TrimPrefix(k, tplHolderPrefix), "/")
	return id, node, ok && id != "" && node != ""
}

// TemplateInfo is the directory's record of template id, if any.
func (n *Node) TemplateInfo(id string) (TemplateRecord, bool) {
	n.dirMu.RLock()
	defer n.dirMu.RUnlock()
	r, ok := n.templates.records[id]
	return r, ok
}

// TemplateHolders lists the nodes that hold template id's image: its
// maker and every node that pulled it, live or not.
func (n *Node) TemplateHolders(id string) []string {
	n.dirMu.RLock()
	defer n.dirMu.RUnlock()
	r, ok := n.templates.records[id]
	if !ok {
		return nil
	}
	out := []string{r.Node}
	for node := range n.templates.holders[id] {
		if node != r.Node {
			out = append(out, node)
		}
	}
	return out
}

// TemplateUsers lists the sandboxes, on any node, whose placement says
// they were made from template id (not those deleted).
func (n *Node) TemplateUsers(id string) []string {
	n.dirMu.RLock()
	defer n.dirMu.RUnlock()
	var out []string
	for _, p := range n.placements {
		if p.Template == id && p.State != StateDeleted {
			out = append(out, p.ID)
		}
	}
	return out
}

// PutTemplate publishes rec (written again when it is there: a record
// never changes but by its maker's retry). Failure modes: ErrUnavailable
// (it may have been applied).
func (n *Node) PutTemplate(ctx context.Context, rec TemplateRecord) error {
	if err := segment("template id", rec.ID); err != nil {
		return fmt.Errorf("put template: %w", err)
	}
	if rec.Owner == "" || rec.Node == "" {
		return fmt.Errorf("put template %s: %w: owner and node are required", rec.ID, ErrInvalidArgument)
	}
	val, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("put template %s: %w", rec.ID, err)
	}
	if len(val) > maxTemplateValue {
		return fmt.Errorf("put template %s: %w: its record is %d bytes", rec.ID, ErrInvalidArgument, len(val))
	}
	ctx, cancel := n.op(ctx)
	defer cancel()
	if _, err := n.cli.Put(ctx, tplRecordKey(rec.ID), string(val)); err != nil {
		return unknownOutcome("put template "+rec.ID, err)
	}
	return nil
}

// FreshTemplate reads template id's record from etcd (a linearizable
// read): for a node whose watch has not delivered it yet.
func (n *Node) FreshTemplate(ctx context.Context, id string) (TemplateRecord, bool, error) {
	if segment("template id", id) != nil {
		return TemplateRecord{}, false, nil
	}
	ctx, cancel := n.op(ctx)
	defer cancel()
	resp, err := n.cli.Get(ctx, tplRecordKey(id))
	if err != nil {
		return TemplateRecord{}, false, unavailable("get template "+id, err)
	}
	if len(resp.Kvs) == 0 {
		return TemplateRecord{}, false, nil
	}
	r, ok := n.decodeTemplate(resp.Kvs[0])
	return r, ok, nil
}

// FreshTag reads what owner's name:tag points to from etcd.
func (n *Node) FreshTag(ctx context.Context, owner, name, tag string) (string, bool, error) {
	ctx, cancel := n.op(ctx)
	defer cancel()
	resp, err := n.cli.Get(ctx, tplTagKey(owner, name, tag))
	if err != nil {
		return "", false, unavailable("get template tag", err)
	}
	if len(resp.Kvs) == 0 {
		return "", false, nil
	}
	return string(resp.Kvs[0].Value), true, nil
}

// SetTemplateTags points owner's name:tag at template id for each of
// tags, in one transaction that holds only while id's record exists
// (ErrNotFound otherwise). With onlyNewer (a template being made), a tag
// that points to a template made after id (its record's CreatedAt) stays
// where it is, as on one node: of two builds of a name, the one asked for
// last keeps it. It returns the tags it set. Failure modes:
// ErrUnavailable (it may have been applied), ErrConflict (the tags kept
// changing under it).
func (n *Node) SetTemplateTags(ctx context.Context, owner, name string, tags []string, id string, onlyNewer bool, createdAt time.Time) ([]string, error) {
	if err := segment("template id", id); err != nil {
		return nil, fmt.Errorf("set template tags: %w", err)
	}
	for range updateAttempts {
		tctx, cancel := n.op(ctx)
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(tplRecordKey(id)), ">", 0)}
		var ops []clientv3.Op
		var set []string
		for _, tag := range tags {
			k := tplTagKey(owner, name, tag)
			resp, err := n.cli.Get(tctx, k)
			if err != nil {
				cancel()
				return nil, unavailable("set template tags", err)
			}
			if len(resp.Kvs) == 0 {
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
			} else {
				cur := resp.Kvs[0]
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", cur.ModRevision))
				if onlyNewer && string(cur.Value) != id {
					other, ok, err := n.FreshTemplate(tctx, string(cur.Value))
					if err != nil {
						cancel()
						return nil, err
					}
					if ok && other.CreatedAt.After(createdAt) {
						continue
					}
				}
			}
			ops = append(ops, clientv3.OpPut(k, id))
			set = append(set, tag)
		}
		resp, err := n.cli.Txn(tctx).If(cmps...).Then(ops...).Commit()
		cancel()
		if err != nil {
			return nil, unknownOutcome("set template tags", err)
		}
		if resp.Succeeded {
			return set, nil
		}
		if _, ok, err := n.FreshTemplate(ctx, id); err != nil {
			return nil, err
		} else if !ok {
			return nil, fmt.Errorf("set template tags: template %s: %w", id, ErrNotFound)
		}
	}
	return nil, fmt.Errorf("set template tags of %s: %w: they kept changing", name, ErrConflict)
}

// RemoveTemplateTags removes owner's name:tag for each of tags and
// reports how many there were.
func (n *Node) RemoveTemplateTags(ctx context.Context, owner, name string, tags []string) (int, error) {
	ctx, cancel := n.op(ctx)
	defer cancel()
	ops := make([]clientv3.Op, 0, len(tags))
	for _, tag := range tags {
		ops = append(ops, clientv3.OpDelete(tplTagKey(owner, name, tag)))
	}
	resp, err := n.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return 0, unknownOutcome("remove template tags", err)
	}
	removed := 0
	for _, r := range resp.Responses {
		removed += int(r.GetResponseDeleteRange().Deleted)
	}
	return removed, nil
}

// DeleteTemplate removes template id's record, the tags of owner's that
// point to it and its holders, in one transaction that holds only while
// no placement made from it exists (ErrTemplateInUse otherwise) and no
// tag of owner's changed since it looked. With untaggedOnly a template a
// tag points to is left (ErrConflict): the sweep of superseded builds
// never takes a tag with it. Absent is not an error.
func (n *Node) DeleteTemplate(ctx context.Context, id, owner string, untaggedOnly bool) (image string, err error) {
	if err := segment("template id", id); err != nil {
		return "", fmt.Errorf("delete template: %w", err)
	}
	uses := tplUsePrefix + id + "/"
	for range updateAttempts {
		tctx, cancel := n.op(ctx)
		resp, err := n.cli.Get(tctx, tplOwnerTags(owner), clientv3.WithPrefix())
		if err != nil {
			cancel()
			return "", unavailable("delete template "+id, err)
		}
		// No placement made from it, and no tag of owner's changed or
		// added since the read.
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(uses), "=", 0).WithPrefix(),
			clientv3.Compare(clientv3.ModRevision(tplOwnerTags(owner)), "<", resp.Header.Revision+1).WithPrefix(),
		}
		ops := []clientv3.Op{
			clientv3.OpDelete(tplRecordKey(id), clientv3.WithPrevKV()),
			clientv3.OpDelete(tplHolderPrefix+id+"/", clientv3.WithPrefix()),
		}
		for _, kv := range resp.Kvs {
			if string(kv.Value) == id {
				if untaggedOnly {
					cancel()
					return "", fmt.Errorf("delete template %s: %w: a tag points to it", id, ErrConflict)
				}
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision))
				ops = append(ops, clientv3.OpDelete(string(kv.Key)))
			}
		}
		txn, err := n.cli.Txn(tctx).If(cmps...).Then(ops...).Else(clientv3.OpGet(uses, clientv3.WithPrefix(), clientv3.WithCountOnly())).Commit()
		cancel()
		if err != nil {
			return "", unknownOutcome("delete template "+id, err)
		}
		if txn.Succeeded {
			if prev := txn.Responses[0].GetResponseDeleteRange().PrevKvs; len(prev) > 0 {
				if r, ok := n.decodeTemplate(prev[0]); ok {
					return r.Image, nil
				}
			}
			return "", nil
		}
		if c := txn.Responses[0].GetResponseRange().Count; c > 0 {
			return "", fmt.Errorf("delete template %s: %w: %d sandboxes made from it", id, ErrTemplateInUse, c)
		}
	}
	return "", fmt.Errorf("delete template %s: %w: its tags kept changing", id, ErrConflict)
}

// HoldTemplate says this node holds template id's image; UnholdTemplate
// that it no longer does.
func (n *Node) HoldTemplate(ctx context.Context, id string) error {
	if err := segment("template id", id); err != nil {
		return fmt.Errorf("hold template: %w", err)
	}
	ctx, cancel := n.op(ctx)
	defer cancel()
	// Only while the record exists: a hold put after a delete would stay.
	k := tplRecordKey(id)
	if _, err := n.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), ">", 0)).
		Then(clientv3.OpPut(tplHolderKey(id, n.cfg.NodeID), "")).Commit(); err != nil {
		return unknownOutcome("hold template "+id, err)
	}
	return nil
}

// UnholdTemplate says this node no longer holds template id's image.
func (n *Node) UnholdTemplate(ctx context.Context, id string) error {
	if err := segment("template id", id); err != nil {
		return fmt.Errorf("unhold template: %w", err)
	}
	ctx, cancel := n.op(ctx)
	defer cancel()
	if _, err := n.cli.Delete(ctx, tplHolderKey(id, n.cfg.NodeID)); err != nil {
		return unknownOutcome("unhold template "+id, err)
	}
	return nil
}

// ImageShared reports whether a template record other than except's names
// image (a build cached under another id is the same image, so the same
// digest): read from etcd, since a record put a moment ago counts.
func (n *Node) ImageShared(ctx context.Context, image, except string) (bool, error) {
	ctx, cancel := n.op(ctx)
	defer cancel()
	resp, err := n.cli.Get(ctx, tplRecordPrefix, clientv3.WithPrefix())
	if err != nil {
		return false, unavailable("template records", err)
	}
	for _, kv := range resp.Kvs {
		if r, ok := n.decodeTemplate(kv); ok && r.ID != except && r.Image == image {
			return true, nil
		}
	}
	return false, nil
}
