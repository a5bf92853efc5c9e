//! Simple XPath expressions run on the page's HTML tree itself, without copying the page into
//! an XPath document: location paths of child, descendant, self, parent and attribute steps
//! with name, `*`, `text()` or `node()` tests and position or attribute predicates
//! (`//div[@class='item']`, `.//a/@href`, `h2[1]/text()`, `//nav/a[1]/@href`), and `count()` of
//! one. They are most of what extractors are written with (Django Dynamic Scraper's examples are
//! all of this kind), and copying a page for sxd-xpath costs more than parsing it. Anything
//! else (functions, other axes, unions, comparisons) is left to sxd-xpath, on the copy; the
//! tests check that both answer the same.
//!
//! The tree is read as the copy would show it: elements and text only (comments, doctypes and
//! processing instructions are not in the copy), names as html5ever gives them.

use ego_tree::NodeId;
use ego_tree::iter::Edge;
use scraper::{Html, Node};
use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};

/// A simple XPath expression: a location path, or the count of the nodes one selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum SimpleXpath {
    Nodes(Path),
    Count(Path),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Path {
    /// Starts at the document's root (`/…`), else at the context node.
    absolute: bool,
    steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Step {
    axis: Axis,
    predicates: Vec<Predicate>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Axis {
    /// `child::` with a node test.
    Child(Test),
    /// `descendant-or-self::node()`, what `//` stands for.
    DescendantOrSelf,
    /// `.`
    SelfNode,
    /// `..`
    Parent,
    /// `@name`
    Attribute(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Test {
    Name(String),
    AnyElement,
    Text,
    Node,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Predicate {
    /// `[3]`: the third of the step's nodes from one context node.
    Position(usize),
    /// `[@name]`
    HasAttr(String),
    /// `[@name='value']`
    AttrEquals(String, String),
}

/// A node a simple path selected: a node of the tree, or an attribute of an element.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Selected {
    Node(NodeId),
    Attribute(NodeId, String),
}

impl SimpleXpath {
    /// The simple form of `expr`, if it has one.
    pub fn parse(expr: &str) -> Option<SimpleXpath> {
        let expr = expr.trim();
        if let Some(inner) = expr
            .strip_prefix("count(")
            .and_then(|rest| rest.strip_suffix(')'))
        {
            return Path::parse(inner.trim()).map(SimpleXpath::Count);
        }
        Path::parse(expr).map(SimpleXpath::Nodes)
    }
}

impl Path {
    fn parse(expr: &str) -> Option<Path> {
        if expr.is_empty() {
            return None;
        }
        let mut steps = Vec::new();
        let (absolute, mut rest) = match expr.strip_prefix("//") {
            Some(rest) => {
                steps.push(Step::plain(Axis::DescendantOrSelf));
                (true, rest)
            }
            None => match expr.strip_prefix('/') {
                Some(rest) => (true, rest),
                None => (false, expr),
            },
        };
        loop {
            let end = step_end(rest)?;
            steps.push(Step::parse(&rest[..end])?);
            rest = &rest[end..];
            if rest.is_empty() {
                return Some(Path { absolute, steps });
            }
            rest = match rest.strip_prefix("//") {
                Some(after) => {
                    steps.push(Step::plain(Axis::DescendantOrSelf));
                    after
                }
                None => rest.strip_prefix('/')?,
            };
        }
    }
}

/// Where the step at the start of `rest` ends: at the first `/` outside quotes and brackets.
fn step_end(rest: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for (i, c) in rest.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '[') => depth += 1,
            (None, ']') => depth = depth.checked_sub(1)?,
            (None, '/') if depth == 0 => return Some(i),
            _ => {}
        }
    }
    (depth == 0 && quote.is_none()).then_some(rest.len())
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

impl Step {
    fn plain(axis: Axis) -> Step {
        Step {
            axis,
            predicates: Vec::new(),
        }
    }

    fn parse(text: &str) -> Option<Step> {
        let (head, mut rest) = match text.find('[') {
            Some(i) => text.split_at(i),
            None => (text, ""),
        };
        let head = head.trim();
        let axis = match head {
            "." => Axis::SelfNode,
            ".." => Axis::Parent,
            "*" => Axis::Child(Test::AnyElement),
            "text()" => Axis::Child(Test::Text),
            "node()" => Axis::Child(Test::Node),
            name if is_name(name) => Axis::Child(Test::Name(name.to_owned())),
            _ => match head.strip_prefix('@') {
                Some(name) if is_name(name) => Axis::Attribute(name.to_owned()),
                _ => return None,
            },
        };
        let mut predicates = Vec::new();
        while !rest.is_empty() {
            let inner = rest.strip_prefix('[')?;
            let end = closing_bracket(inner)?;
            predicates.push(Predicate::parse(inner[..end].trim())?);
            rest = &inner[end + 1..];
        }
        // Predicates on the self, parent and attribute steps are left to sxd-xpath.
        if !predicates.is_empty() && !matches!(axis, Axis::Child(_)) {
            return None;
        }
        Some(Step { axis, predicates })
    }
}

/// The index of the `]` closing a predicate whose text starts `inner` (quotes respected).
fn closing_bracket(inner: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (i, c) in inner.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, ']') => return Some(i),
            (None, '[') => return None,
            _ => {}
        }
    }
    None
}

impl Predicate {
    fn parse(text: &str) -> Option<Predicate> {
        if let Ok(n) = text.parse::<usize>() {
            return (n > 0).then_some(Predicate::Position(n));
        }
        let attr = text.strip_prefix('@')?;
        let Some((name, value)) = attr.split_once('=') else {
            return is_name(attr).then(|| Predicate::HasAttr(attr.to_owned()));
        };
        let (name, value) = (name.trim(), value.trim());
        let quoted = value
            .strip_prefix('\'')
            .and_then(|v| v.strip_suffix('\''))
            .or_else(|| value.strip_prefix('"').and_then(|v| v.strip_suffix('"')))
            .filter(|v| !v.contains(['\'', '"']))?;
        is_name(name).then(|| Predicate::AttrEquals(name.to_owned(), quoted.to_owned()))
    }

    fn keeps(&self, doc: &Html, id: NodeId, position: usize) -> bool {
        match self {
            Predicate::Position(n) => position == *n,
            Predicate::HasAttr(name) => attr(doc, id, name).is_some(),
            Predicate::AttrEquals(name, value) => attr(doc, id, name) == Some(value.as_str()),
        }
    }
}

fn attr<'a>(doc: &'a Html, id: NodeId, name: &str) -> Option<&'a str> {
    match doc.tree.get(id)?.value() {
        Node::Element(e) => e.attr(name),
        _ => None,
    }
}

/// Whether `predicates` keep the node `id`, the next of its siblings that passed the step's
/// test: each predicate counts positions among the siblings the ones before it kept
/// (`reached[k]`: the siblings so far that reached predicate `k`).
fn kept(predicates: &[Predicate], doc: &Html, id: NodeId, reached: &mut [usize]) -> bool {
    for (predicate, position) in predicates.iter().zip(reached) {
        *position += 1;
        if !predicate.keeps(doc, id, *position) {
            return false;
        }
    }
    true
}

/// Whether the node is one the XPath copy holds (an element or text, or the document).
fn in_copy(node: &Node) -> bool {
    matches!(node, Node::Element(_) | Node::Text(_) | Node::Document)
}

fn passes(test: &Test, node: &Node) -> bool {
    match (test, node) {
        (Test::Name(name), Node::Element(e)) => e.name() == name,
        (Test::AnyElement, Node::Element(_)) => true,
        (Test::Text, Node::Text(_)) => true,
        (Test::Node, node) => in_copy(node),
        _ => false,
    }
}

/// Runs simple paths on one page: the document order of its nodes is computed once, when a
/// step from several context nodes needs it, and its elements listed by name once, when a
/// path or a selector asks for elements of a name anywhere in the page.
pub(super) struct Evaluator<'a> {
    doc: &'a Html,
    order: OnceCell<HashMap<NodeId, usize>>,
    names: OnceCell<HashMap<&'a str, Vec<NodeId>>>,
}

impl<'a> Evaluator<'a> {
    pub fn new(doc: &'a Html) -> Self {
        Self {
            doc,
            order: OnceCell::new(),
            names: OnceCell::new(),
        }
    }

    /// The page's elements named `name`, in document order. Fields like `//p`, `count(//p)`,
    /// `//nav/a[1]` or the selector `p` each walked the whole tree: ten fields were ten walks
    /// (~13% of the extraction's extra CPU on the bench's pages, perf); now they share one.
    pub fn named(&self, name: &str) -> &[NodeId] {
        let names = self.names.get_or_init(|| {
            let mut names: HashMap<&'a str, Vec<NodeId>> = HashMap::new();
            for node in self.doc.tree.root().descendants() {
                if let Node::Element(e) = node.value() {
                    names.entry(e.name()).or_default().push(node.id());
                }
            }
            names
        });
        names.get(name).map_or(&[], Vec::as_slice)
    }

    /// The nodes `path` selects from the context node `ctx`, in document order.
    pub fn select(&self, path: &Path, ctx: NodeId) -> Vec<Selected> {
        let start = if path.absolute {
            self.doc.tree.root().id()
        } else {
            ctx
        };
        let mut current = vec![Selected::Node(start)];
        let mut steps = path.steps.iter().peekable();
        while let Some(step) = steps.next() {
            // `//` and the child step after it are taken in one walk of the tree: listing
            // every node first, then sorting what their children gave, was most of the cost
            // of a field like `//p` (profile of the bench's crawl with extraction).
            let fused = match (&step.axis, steps.peek()) {
                (Axis::DescendantOrSelf, Some(child)) => match &child.axis {
                    Axis::Child(test) => Some((*child, test)),
                    _ => None,
                },
                _ => None,
            };
            let mut next = Vec::new();
            for selected in &current {
                let Selected::Node(id) = selected else {
                    continue;
                };
                match fused {
                    Some((child, Test::Name(name))) if *id == self.doc.tree.root().id() => {
                        self.named_children(child, name, &mut next);
                    }
                    Some((child, test)) => self.under(child, test, *id, &mut next),
                    None => self.step(step, *id, &mut next),
                }
            }
            if fused.is_some() {
                steps.next();
            }
            // From one node a step (or a walk) gives document order without duplicates; from
            // several they may interleave and overlap.
            if current.len() > 1 {
                self.sort_unique(&mut next);
            }
            current = next;
        }
        current
    }

    /// `//` then the child step `child`, named `name`, from the document: the elements of that
    /// name its predicates keep among their parent's children (each parent's children counted
    /// once, as the child step from it counts them).
    fn named_children(&self, child: &Step, name: &str, out: &mut Vec<Selected>) {
        let named = self.named(name);
        if child.predicates.is_empty() {
            out.extend(named.iter().map(|&id| Selected::Node(id)));
            return;
        }
        let mut kept_of: HashMap<NodeId, HashSet<Selected>> = HashMap::new();
        for &id in named {
            let Some(parent) = self.doc.tree.get(id).and_then(|n| n.parent()) else {
                continue;
            };
            let kept = kept_of.entry(parent.id()).or_insert_with(|| {
                let mut kept = Vec::new();
                self.step(child, parent.id(), &mut kept);
                kept.into_iter().collect()
            });
            let node = Selected::Node(id);
            if kept.contains(&node) {
                out.push(node);
            }
        }
    }

    /// `//` then the child step `child` from `id`: the children `child` keeps of `id` and of
    /// every node under it that the XPath copy holds, in document order, each once.
    fn under(&self, child: &Step, test: &Test, id: NodeId, out: &mut Vec<Selected>) {
        let Some(node) = self.doc.tree.get(id) else {
            return;
        };
        // Per node open in the walk, whether the copy holds it (a node it does not hold has
        // no children `//` reaches), and for each one held, its children that reached each
        // predicate so far (`kept`), in one stack.
        let k = child.predicates.len();
        let mut open: Vec<bool> = Vec::new();
        let mut reached: Vec<usize> = Vec::new();
        for edge in node.traverse() {
            match edge {
                Edge::Open(n) => {
                    let parent_held = open.last() == Some(&true);
                    if parent_held
                        && passes(test, n.value())
                        && let Some(counts) =
                            reached.len().checked_sub(k).map(|at| &mut reached[at..])
                        && kept(&child.predicates, self.doc, n.id(), counts)
                    {
                        out.push(Selected::Node(n.id()));
                    }
                    let held = in_copy(n.value());
                    if held {
                        reached.extend(std::iter::repeat_n(0, k));
                    }
                    open.push(held);
                }
                Edge::Close(_) => {
                    if open.pop() == Some(true) {
                        reached.truncate(reached.len().saturating_sub(k));
                    }
                }
            }
        }
    }

    fn step(&self, step: &Step, id: NodeId, out: &mut Vec<Selected>) {
        let Some(node) = self.doc.tree.get(id) else {
            return;
        };
        match &step.axis {
            Axis::Child(test) => {
                let mut reached = vec![0; step.predicates.len()];
                out.extend(
                    node.children()
                        .filter(|c| {
                            passes(test, c.value())
                                && kept(&step.predicates, self.doc, c.id(), &mut reached)
                        })
                        .map(|c| Selected::Node(c.id())),
                );
            }
            Axis::DescendantOrSelf => out.extend(
                node.descendants()
                    .filter(|d| in_copy(d.value()))
                    .map(|d| Selected::Node(d.id())),
            ),
            Axis::SelfNode => out.push(Selected::Node(id)),
            Axis::Parent => out.extend(node.parent().map(|p| Selected::Node(p.id()))),
            Axis::Attribute(name) => {
                if attr(self.doc, id, name).is_some() {
                    out.push(Selected::Attribute(id, name.clone()));
                }
            }
        }
    }

    /// Document order without duplicates (attributes right after their element).
    fn sort_unique(&self, nodes: &mut Vec<Selected>) {
        let order = self.order.get_or_init(|| {
            let root = self.doc.tree.root();
            root.descendants()
                .enumerate()
                .map(|(i, n)| (n.id(), i))
                .collect()
        });
        let key = |s: &Selected| match s {
            Selected::Node(id) => (order.get(id).copied().unwrap_or(usize::MAX), 0),
            Selected::Attribute(id, _) => (order.get(id).copied().unwrap_or(usize::MAX), 1),
        };
        let mut seen = HashSet::new();
        nodes.retain(|s| seen.insert(s.clone()));
        nodes.sort_by_key(key);
    }

    /// The text of a selected node: an attribute's value, a text node's text, an element's
    /// (or the document's) descendant text.
    pub fn text_of(&self, selected: &Selected) -> Option<String> {
        match selected {
            Selected::Attribute(id, name) => attr(self.doc, *id, name).map(str::to_owned),
            Selected::Node(id) => {
                let node = self.doc.tree.get(*id)?;
                Some(match node.value() {
                    Node::Text(t) => t.to_string(),
                    _ => node
                        .descendants()
                        .filter_map(|d| d.value().as_text().map(|t| t.to_string()))
                        .collect(),
                })
            }
        }
    }
}
