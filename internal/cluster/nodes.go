package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ListNodes lists the live sandboxd nodes of the cluster at endpoints (the
// nodes/ keys, each under its node's lease), sorted by id: what `sandboxd
// cluster members` shows beside the etcd members.
func ListNodes(ctx context.Context, endpoints []string, tlsCfg *tls.Config) ([]NodeInfo, error) {
	cli, err := adminClient(endpoints, tlsCfg)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	defer cli.Close()
	ctx, cancel := withAdminTimeout(ctx)
	defer cancel()
	res, err := cli.Get(ctx, nodesPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, unavailable("list nodes", err)
	}
	out := make([]NodeInfo, 0, len(res.Kvs))
	for _, kv := range res.Kvs {
		var ni NodeInfo
		if json.Unmarshal(kv.Value, &ni) != nil {
			continue
		}
		ni.ID = strings.TrimPrefix(string(kv.Key), nodesPrefix)
		out = append(out, ni)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
