package main

import "fmt"

// The nodes of a cluster, by name: the namespaces and addresses of a
// netnsLayout are keyed by them.
const namesrvNode = "ns"

func ctrlNode(i int) string          { return fmt.Sprintf("c%d", i) }
func brokerNode(group, i int) string { return fmt.Sprintf("b%d%d", group, i) }

// netnsLayout is a set of network namespaces a test created: one per
// node, each joined by a veth pair to a bridge in a namespace of its own,
// with an address of one /24 (none in the root namespace).
type netnsLayout struct {
	Prefix string            // every namespace's name starts with it
	Subnet string            // the first three bytes of the /24, "10.231.7"
	Nodes  map[string]int    // node -> its host number in the subnet
	NS     map[string]string // node -> its namespace
}

func (l *netnsLayout) ns(node string) string { return l.NS[node] }
func (l *netnsLayout) ip(node string) string { return fmt.Sprintf("%s.%d", l.Subnet, l.Nodes[node]) }
