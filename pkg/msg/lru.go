package msg

import (
	"container/list"
	"sync"
)

// lru is a map bounded by the total cost of its values: adding past the
// bound drops the least recently used entries. Safe for concurrent use.
type lru[K comparable, V any] struct {
	mu      sync.Mutex
	max     int
	cost    func(V) int
	used    int
	order   *list.List // front: most recently used
	entries map[K]*list.Element
}

type lruEntry[K comparable, V any] struct {
	key K
	val V
}

func newLRU[K comparable, V any](maxCost int, cost func(V) int) *lru[K, V] {
	return &lru[K, V]{max: maxCost, cost: cost, order: list.New(), entries: map[K]*list.Element{}}
}

func (c *lru[K, V]) get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*lruEntry[K, V]).val, true
}

func (c *lru[K, V]) put(k K, v V) {
	n := c.cost(v)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[k]; ok {
		en := e.Value.(*lruEntry[K, V])
		c.used += n - c.cost(en.val)
		en.val = v
		c.order.MoveToFront(e)
	} else {
		if n > c.max {
			return
		}
		c.entries[k] = c.order.PushFront(&lruEntry[K, V]{key: k, val: v})
		c.used += n
	}
	for c.used > c.max {
		e := c.order.Back()
		en := e.Value.(*lruEntry[K, V])
		c.order.Remove(e)
		delete(c.entries, en.key)
		c.used -= c.cost(en.val)
	}
}

func (c *lru[K, V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// atLeast raises the bound to n if it is lower.
func (c *lru[K, V]) atLeast(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.max = max(c.max, n)
}
