// Layer 2: an intrusive red-black tree of free blocks ordered by (size, address) -- the order
// of PyTorch's BlockComparatorSize within one stream. Best fit is lower_bound(size): the
// smallest block that fits, the lowest address among equals. Nodes carry their own links, so
// insert/erase never allocate; every operation is O(log n).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// Node needs members tree_left, tree_right, tree_parent (Node*), tree_red (bool), size, addr; the
/// links may be private to Node if it befriends FreeTree (Block does: only the tree writes them).
template <class Node>
class FreeTree {
 public:
  [[nodiscard]] bool empty() const noexcept { return root_ == nullptr; }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }

  /// The smallest node with size >= `size` (lowest address among equal sizes), or nullptr.
  [[nodiscard]] Node* lower_bound(std::size_t size) const noexcept {
    Node* best = nullptr;
    for (Node* x = root_; x != nullptr;) {
      if (x->size >= size) {
        best = x;
        x = x->tree_left;
      } else {
        x = x->tree_right;
      }
    }
    return best;
  }

  [[nodiscard]] Node* first() const noexcept { return root_ ? leftmost(root_) : nullptr; }
  [[nodiscard]] Node* last() const noexcept { return root_ ? rightmost(root_) : nullptr; }

  [[nodiscard]] static Node* next(Node* x) noexcept {
    if (x->tree_right) return leftmost(x->tree_right);
    Node* p = x->tree_parent;
    while (p && x == p->tree_right) {
      x = p;
      p = p->tree_parent;
    }
    return p;
  }
  [[nodiscard]] static Node* prev(Node* x) noexcept {
    if (x->tree_left) return rightmost(x->tree_left);
    Node* p = x->tree_parent;
    while (p && x == p->tree_left) {
      x = p;
      p = p->tree_parent;
    }
    return p;
  }

  void insert(Node* z) noexcept {
    Node* y = nullptr;
    for (Node* x = root_; x != nullptr;) {
      y = x;
      x = less(z, x) ? x->tree_left : x->tree_right;
    }
    z->tree_parent = y;
    z->tree_left = z->tree_right = nullptr;
    z->tree_red = true;
    if (!y) {
      root_ = z;
    } else if (less(z, y)) {
      y->tree_left = z;
    } else {
      y->tree_right = z;
    }
    insert_fixup(z);
    ++count_;
  }

  /// Makes `z` the only node of this tree, which the caller knows to be empty: stores only,
  /// the tree's own fields are not read.
  void assign_sole(Node* z) noexcept {
    z->tree_left = z->tree_right = z->tree_parent = nullptr;
    z->tree_red = false;
    root_ = z;
    count_ = 1;
  }
  /// Whether `z`, a node of some tree, is its only node (a root without children).
  [[nodiscard]] static bool is_sole(const Node* z) noexcept {
    return z->tree_parent == nullptr && z->tree_left == nullptr && z->tree_right == nullptr;
  }
  /// Removes the only node (is_sole() held for it): stores only.
  void clear_sole() noexcept {
    root_ = nullptr;
    count_ = 0;
  }

  void erase(Node* z) noexcept {
    Node* y = z;
    bool y_was_red = y->tree_red;
    Node* x = nullptr;
    Node* xp = nullptr;  // x's parent (x may be null)
    if (!z->tree_left) {
      x = z->tree_right;
      xp = z->tree_parent;
      transplant(z, z->tree_right);
    } else if (!z->tree_right) {
      x = z->tree_left;
      xp = z->tree_parent;
      transplant(z, z->tree_left);
    } else {
      y = leftmost(z->tree_right);
      y_was_red = y->tree_red;
      x = y->tree_right;
      if (y->tree_parent == z) {
        xp = y;
      } else {
        xp = y->tree_parent;
        transplant(y, y->tree_right);
        y->tree_right = z->tree_right;
        y->tree_right->tree_parent = y;
      }
      transplant(z, y);
      y->tree_left = z->tree_left;
      y->tree_left->tree_parent = y;
      y->tree_red = z->tree_red;
    }
    if (!y_was_red) erase_fixup(x, xp);
    z->tree_left = z->tree_right = z->tree_parent = nullptr;
    --count_;
  }

  /// Checks ordering, parent links and the red-black rules; throws std::logic_error.
  void check() const {
    if (root_ && (root_->tree_red || root_->tree_parent)) fail("root is red or has a parent");
    std::size_t n = 0;
    check_subtree(root_, nullptr, nullptr, n);
    if (n != count_) fail("node count " + std::to_string(n) + " != recorded " + std::to_string(count_));
  }

  /// Whether `node` is linked into this tree (walks up to the root: O(log n)).
  [[nodiscard]] bool contains(const Node* node) const noexcept {
    while (node && node->tree_parent) node = node->tree_parent;
    return node == root_ && root_ != nullptr;
  }

 private:
  static bool less(const Node* a, const Node* b) noexcept {
    return a->size < b->size || (a->size == b->size && a->addr < b->addr);
  }
  static Node* leftmost(Node* x) noexcept {
    while (x->tree_left) x = x->tree_left;
    return x;
  }
  static Node* rightmost(Node* x) noexcept {
    while (x->tree_right) x = x->tree_right;
    return x;
  }
  static bool red(const Node* x) noexcept { return x && x->tree_red; }

  void rotate_left(Node* x) noexcept {
    Node* y = x->tree_right;
    x->tree_right = y->tree_left;
    if (y->tree_left) y->tree_left->tree_parent = x;
    y->tree_parent = x->tree_parent;
    if (!x->tree_parent)
      root_ = y;
    else if (x == x->tree_parent->tree_left)
      x->tree_parent->tree_left = y;
    else
      x->tree_parent->tree_right = y;
    y->tree_left = x;
    x->tree_parent = y;
  }
  void rotate_right(Node* x) noexcept {
    Node* y = x->tree_left;
    x->tree_left = y->tree_right;
    if (y->tree_right) y->tree_right->tree_parent = x;
    y->tree_parent = x->tree_parent;
    if (!x->tree_parent)
      root_ = y;
    else if (x == x->tree_parent->tree_right)
      x->tree_parent->tree_right = y;
    else
      x->tree_parent->tree_left = y;
    y->tree_right = x;
    x->tree_parent = y;
  }
  void transplant(Node* u, Node* v) noexcept {
    if (!u->tree_parent)
      root_ = v;
    else if (u == u->tree_parent->tree_left)
      u->tree_parent->tree_left = v;
    else
      u->tree_parent->tree_right = v;
    if (v) v->tree_parent = u->tree_parent;
  }

  void insert_fixup(Node* z) noexcept {
    while (red(z->tree_parent)) {
      Node* p = z->tree_parent;
      Node* g = p->tree_parent;  // exists: a red node is never the root
      if (p == g->tree_left) {
        Node* u = g->tree_right;
        if (red(u)) {
          p->tree_red = u->tree_red = false;
          g->tree_red = true;
          z = g;
        } else {
          if (z == p->tree_right) {
            z = p;
            rotate_left(z);
            p = z->tree_parent;
          }
          p->tree_red = false;
          g->tree_red = true;
          rotate_right(g);
        }
      } else {
        Node* u = g->tree_left;
        if (red(u)) {
          p->tree_red = u->tree_red = false;
          g->tree_red = true;
          z = g;
        } else {
          if (z == p->tree_left) {
            z = p;
            rotate_right(z);
            p = z->tree_parent;
          }
          p->tree_red = false;
          g->tree_red = true;
          rotate_left(g);
        }
      }
    }
    root_->tree_red = false;
  }

  void erase_fixup(Node* x, Node* xp) noexcept {
    while (x != root_ && !red(x)) {
      if (x == xp->tree_left) {
        Node* w = xp->tree_right;  // non-null: x's side lost a black node
        if (w->tree_red) {
          w->tree_red = false;
          xp->tree_red = true;
          rotate_left(xp);
          w = xp->tree_right;
        }
        if (!red(w->tree_left) && !red(w->tree_right)) {
          w->tree_red = true;
          x = xp;
          xp = x->tree_parent;
        } else {
          if (!red(w->tree_right)) {
            w->tree_left->tree_red = false;
            w->tree_red = true;
            rotate_right(w);
            w = xp->tree_right;
          }
          w->tree_red = xp->tree_red;
          xp->tree_red = false;
          if (w->tree_right) w->tree_right->tree_red = false;
          rotate_left(xp);
          x = root_;
          break;
        }
      } else {
        Node* w = xp->tree_left;
        if (w->tree_red) {
          w->tree_red = false;
          xp->tree_red = true;
          rotate_right(xp);
          w = xp->tree_left;
        }
        if (!red(w->tree_right) && !red(w->tree_left)) {
          w->tree_red = true;
          x = xp;
          xp = x->tree_parent;
        } else {
          if (!red(w->tree_left)) {
            w->tree_right->tree_red = false;
            w->tree_red = true;
            rotate_left(w);
            w = xp->tree_left;
          }
          w->tree_red = xp->tree_red;
          xp->tree_red = false;
          if (w->tree_left) w->tree_left->tree_red = false;
          rotate_right(xp);
          x = root_;
          break;
        }
      }
    }
    if (x) x->tree_red = false;
  }

  // Returns the black height; checks order against the (lo, hi) bounds.
  int check_subtree(const Node* x, const Node* lo, const Node* hi, std::size_t& n) const {
    if (!x) return 1;
    ++n;
    if ((lo && !less(lo, x)) || (hi && !less(x, hi))) fail("free blocks out of (size, address) order");
    if (x->tree_left && x->tree_left->tree_parent != x) fail("broken parent link");
    if (x->tree_right && x->tree_right->tree_parent != x) fail("broken parent link");
    if (x->tree_red && (red(x->tree_left) || red(x->tree_right))) fail("red node with a red child");
    const int l = check_subtree(x->tree_left, lo, x, n);
    const int r = check_subtree(x->tree_right, x, hi, n);
    if (l != r) fail("unequal black heights");
    return l + (x->tree_red ? 0 : 1);
  }
  [[noreturn]] static void fail(const std::string& what) {
    throw std::logic_error("free-block tree invariant broken: " + what);
  }

  Node* root_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
