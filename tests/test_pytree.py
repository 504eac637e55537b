"""einad.pytree: pytrees as in JAX: namedtuples, dict subclasses, None and registered classes through every
transformation and ea.jit, rebuilt as their own types; TreeDef equality and hashing."""

from collections import OrderedDict, defaultdict, namedtuple

import numpy as np
import pytest

import einad as ea
from einad.pytree import TreeDef
from tests.support.jitting import compiled
from tests.support.numerics import assert_close

pytestmark = pytest.mark.usefixtures("jit_mode")  # each test eagerly and with every transformation jitted

Params = namedtuple("Params", "w b")


class Box(dict):
    """A plain dict subclass."""


class Point:
    """A user class registered as a pytree node; `name` is auxiliary data, not a leaf."""

    def __init__(self, x, y, name="p"):
        self.x, self.y, self.name = x, y, name


ea.register_pytree_node(Point, lambda p: ((p.x, p.y), p.name), lambda name, xy: Point(*xy, name=name))


def structure(tree):
    return ea.tree_flatten(tree)[1]


def make_tree():
    return {
        "nt": Params(w=np.array([1.0, 2.0]), b=np.array(3.0)),
        "od": OrderedDict([("z", np.array([0.5])), ("a", np.array(2.0))]),  # not in sorted order
        "sub": Box(k=np.array([1.0, -1.0])),
        "none": [None, (None, {"n": None})],
        "pt": Point(np.array(1.5), np.array([2.0, 3.0]), name="origin"),
    }


def f(t):
    """A scalar of every leaf."""
    nt, od, pt = t["nt"], t["od"], t["pt"]
    return (
        ea.sum(nt.w**2) * nt.b
        + ea.sum(od["z"]) * od["a"]
        + ea.sum(ea.sin(t["sub"]["k"]))
        + pt.x * ea.sum(pt.y)
    )


def f_grad(t):
    """f's gradient by hand, as the same kind of tree."""
    nt, od, pt = t["nt"], t["od"], t["pt"]
    return {
        "nt": Params(w=2 * nt.w * nt.b, b=np.sum(nt.w**2)),
        "od": OrderedDict([("z", od["a"] * np.ones(1)), ("a", np.sum(od["z"]))]),
        "sub": Box(k=np.cos(t["sub"]["k"])),
        "none": [None, (None, {"n": None})],
        "pt": Point(np.sum(pt.y), pt.x * np.ones(2), name="origin"),
    }


def h(t):
    """A pytree-valued function: a namedtuple holding a dict subclass with a None."""
    return Params(w=t["nt"].w * t["pt"].x, b=Box(s=ea.sum(t["sub"]["k"] ** 2), n=None))


def assert_same_tree(actual, expected):
    assert structure(actual) == structure(expected), f"{structure(actual)} != {structure(expected)}"
    for a, e in zip(ea.tree_flatten(actual)[0], ea.tree_flatten(expected)[0]):
        assert isinstance(a, np.ndarray), type(a)
        assert_close(a, e)


def check_types(g):
    """The node types themselves, not just equal structures."""
    assert type(g["nt"]) is Params and type(g["od"]) is OrderedDict and type(g["sub"]) is Box
    assert list(g["od"]) == ["z", "a"]
    assert g["none"] == [None, (None, {"n": None})]
    assert type(g["pt"]) is Point and g["pt"].name == "origin"


# -- the two reported bugs ------------------------------------------------------------------------


def test_a_namedtuple_of_parameters_gets_a_namedtuple_of_gradients_not_a_stacked_array():
    p = Params(w=np.array([1.0, 2.0]), b=np.array(3.0))
    g = ea.grad(lambda p: ea.sum(p.w * p.b))(p)
    assert type(g) is Params
    assert_close(g.w, [3.0, 3.0])
    assert_close(g.b, 3.0)


def test_a_dict_subclass_is_a_node_not_an_object_array():
    g = ea.grad(lambda d: ea.sum(d["w"] ** 2) + d["c"])(Box(w=np.array([1.0, -2.0]), c=np.array(0.5)))
    assert type(g) is Box
    assert_close(g["w"], [2.0, -4.0])
    assert_close(g["c"], 1.0)


# -- every transformation ---------------------------------------------------------------------------


def test_grad_and_value_and_grad_on_every_kind_of_node():
    t = make_tree()
    g = ea.grad(f)(t)
    check_types(g)
    assert_same_tree(g, f_grad(t))
    value, g2 = ea.value_and_grad(f)(t)
    assert_close(value, 5.0 * 3.0 + 0.5 * 2.0 + np.sum(np.sin([1.0, -1.0])) + 1.5 * 5.0)
    check_types(g2)
    assert_same_tree(g2, f_grad(t))


def test_grad_with_two_pytree_arguments():
    p = Params(w=np.array([1.0, 2.0]), b=np.array(0.5))
    q = Point(np.array(3.0), np.array([1.0, 1.0]))
    gp, gq = ea.grad(lambda p, q: ea.sum(p.w * q.y) * p.b * q.x, argnums=(0, 1))(p, q)
    assert type(gp) is Params and type(gq) is Point and gq.name == "p"
    assert_close(gp.w, 0.5 * 3.0 * np.ones(2))
    assert_close(gp.b, 3.0 * 3.0)
    assert_close(gq.x, 3.0 * 0.5)
    assert_close(gq.y, 0.5 * 3.0 * np.array([1.0, 2.0]))


def test_jvp_pushes_a_tree_of_tangents_to_a_tree_of_outputs():
    t = make_tree()
    dt = ea.tree_map(lambda x: np.full(np.shape(x), 0.5), t)
    out, tangent = ea.jvp(h, (t,), (dt,))
    w, x, k = t["nt"].w, 1.5, np.array([1.0, -1.0])
    expected_out = Params(w=w * x, b=Box(s=np.sum(k**2), n=None))
    assert type(out) is Params and type(out.b) is Box and out.b["n"] is None
    assert_same_tree(out, expected_out)
    assert_same_tree(tangent, Params(w=0.5 * x + w * 0.5, b=Box(s=np.sum(2 * k * 0.5), n=None)))


def test_vjp_pulls_a_tree_of_cotangents_back_to_the_input_tree():
    t = make_tree()
    _, pullback = ea.vjp(h, t)
    ct = Params(w=np.array([1.0, -1.0]), b=Box(s=np.array(2.0), n=None))
    (g,) = pullback(ct)
    check_types(g)
    k = np.array([1.0, -1.0])
    expected = ea.tree_map(np.zeros_like, t)
    expected["nt"] = Params(w=ct.w * 1.5, b=np.array(0.0))
    expected["sub"] = Box(k=2.0 * 2 * k)
    expected["pt"] = Point(np.sum(ct.w * t["nt"].w), np.zeros(2), name="origin")
    assert_same_tree(g, expected)


@pytest.mark.parametrize("jac", ["jacrev", "jacfwd"])
def test_jacobians_are_output_trees_of_input_trees(jac):
    t = make_tree()
    J = getattr(ea, jac)(h)(t)
    assert type(J) is Params and type(J.b) is Box and J.b["n"] is None
    for block in (J.w, J.b["s"]):
        check_types(block)
    w, x, k = t["nt"].w, 1.5, np.array([1.0, -1.0])
    assert_close(J.w["nt"].w, np.diag([x, x]))
    assert_close(J.w["nt"].b, np.zeros((2,)))
    assert_close(J.w["pt"].x, w)
    assert_close(J.w["od"]["z"], np.zeros((2, 1)))
    assert_close(J.b["s"]["sub"]["k"], 2 * k)
    assert_close(J.b["s"]["pt"].y, np.zeros(2))


def test_hessian_of_a_namedtuple_and_of_a_registered_class():
    p = Params(w=np.array([1.0, 2.0]), b=np.array(3.0))
    H = ea.hessian(lambda p: ea.sum(p.w**2) * p.b)(p)
    assert type(H) is Params and type(H.w) is Params and type(H.b) is Params
    assert_close(H.w.w, 2 * 3.0 * np.eye(2))
    assert_close(H.w.b, 2 * p.w)
    assert_close(H.b.w, 2 * p.w)
    assert_close(H.b.b, 0.0)
    q = Point(np.array(2.0), np.array(0.5), name="q")
    Hq = ea.hessian(lambda q: q.x**3 * ea.sin(q.y))(q)
    assert type(Hq) is Point and type(Hq.x) is Point and Hq.name == Hq.y.name == "q"
    assert_close(Hq.x.x, 6 * 2.0 * np.sin(0.5))
    assert_close(Hq.x.y, 3 * 4.0 * np.cos(0.5))
    assert_close(Hq.y.y, -8.0 * np.sin(0.5))


def test_defaultdict_keeps_its_factory_and_none_stays_in_place():
    d = defaultdict(list, {"b": np.array([1.0, 2.0]), "a": np.array(3.0)})
    g = ea.grad(lambda d: ea.sum(d["b"]) * d["a"])(d)
    assert type(g) is defaultdict and g.default_factory is list
    assert_close(g["a"], 3.0)
    assert_close(g["b"], [3.0, 3.0])
    tree = {"x": np.array([1.0, 2.0]), "skip": None, "deep": [None, {"none": None}]}
    g = ea.grad(lambda t: ea.sum(t["x"] ** 3))(tree)
    assert g["skip"] is None and g["deep"] == [None, {"none": None}]
    assert_close(g["x"], [3.0, 12.0])


# -- ea.jit: the cache is keyed on the structure, types and aux data included ----------------------


def test_jit_rebuilds_the_output_tree_and_keys_its_cache_on_the_structure():
    jh = ea.jit(h)
    t = make_tree()
    out = jh(t)
    assert type(out) is Params and type(out.b) is Box and out.b["n"] is None
    t2 = ea.tree_map(lambda x: np.asarray(2 * x), t)
    assert_close(jh(t2).w, 2 * t["nt"].w * 3.0)
    assert jh.cache_size() == 1  # same structure: no retrace
    t3 = make_tree()
    t3["pt"] = Point(np.array(1.5), np.array([2.0, 3.0]), name="elsewhere")  # other aux data
    jh(t3)
    assert jh.cache_size() == 2
    t4 = make_tree()
    t4["od"] = OrderedDict([("a", np.array(2.0)), ("z", np.array([0.5]))])  # other key order
    jh(t4)
    assert jh.cache_size() == 3
    jg = ea.jit(ea.grad(f))
    g = jg(t3)
    assert g["pt"].name == "elsewhere"
    assert list(jg(t4)["od"]) == ["a", "z"]


def test_jit_tells_a_namedtuple_from_a_tuple():
    jf = ea.jit(lambda p: p[0] * p[1])
    jf((np.ones(2), np.ones(2)))
    jf(Params(np.ones(2), np.ones(2)))
    assert jf.cache_size() == 2
    jid = compiled(ea.jit(lambda p: p))
    assert type(jid(Params(np.ones(2), np.ones(2)))) is Params
    assert type(jid((np.ones(2), np.ones(2)))) is tuple


# -- TreeDef, registration, tree utilities ----------------------------------------------------------


def test_treedef_equality_and_hash_include_the_type_and_aux_data():
    a = np.ones(2)
    same = [({"x": a, "y": a}, {"y": 0, "x": 1}), (Params(a, a), Params(1, 2)), (Box(k=a), Box(k=3))]
    for t1, t2 in same:
        assert structure(t1) == structure(t2) and hash(structure(t1)) == hash(structure(t2))
    different = [
        (Params(a, a), (a, a)),
        (Box(k=a), {"k": a}),
        (OrderedDict(x=a, y=a), OrderedDict(y=a, x=a)),
        (OrderedDict(x=a), {"x": a}),
        (Point(a, a, name="u"), Point(a, a, name="v")),
        ([a, None], [a, a]),
        (defaultdict(list, x=a), defaultdict(dict, x=a)),
    ]
    for t1, t2 in different:
        assert structure(t1) != structure(t2)
    cache = {structure(t1): 1 for t1, _ in different}
    assert all(structure(t1) in cache for t1, _ in different)
    assert isinstance(structure(a), TreeDef) and structure(a).is_leaf


def test_treedef_repr_and_leaf_paths():
    t = {"p": Params(1.0, [2.0, None]), "o": OrderedDict(b=3.0), "pt": Point(4.0, 5.0, name="n")}
    td = structure(t)
    assert repr(td) == "{'o': OrderedDict({'b': *}), 'p': Params(w=*, b=[*, None]), 'pt': Point['n'](*, *)}"
    assert td.leaf_paths("t") == ["t['o']['b']", "t['p'].w", "t['p'].b[0]", "t['pt'][0]", "t['pt'][1]"]


def test_tree_flatten_unflatten_round_trip():
    t = make_tree()
    leaves, td = ea.tree_flatten(t)
    assert len(leaves) == td.num_leaves == 7
    back = ea.tree_unflatten(td, leaves)
    check_types(back)
    assert structure(back) == td
    with pytest.raises(ValueError, match="7 leaves"):
        ea.tree_unflatten(td, leaves[:-1])


def test_tree_map_over_several_trees_and_its_structure_check():
    p, g = Params(np.array([1.0]), np.array(2.0)), Params(np.array([0.5]), np.array(1.0))
    new = ea.tree_map(lambda x, dx: x - 0.1 * dx, p, g)
    assert type(new) is Params
    assert_close(new.w, [0.95])
    with pytest.raises(ValueError, match="does not match"):
        ea.tree_map(lambda x, y: x, p, (np.ones(1), np.ones(1)))


def test_registration_errors():
    for t in (tuple, list, dict, type(None), Point):
        with pytest.raises(ValueError, match="already a pytree node"):
            ea.register_pytree_node(t, lambda x: ((), None), lambda aux, ch: None)


def test_unhashable_aux_data_is_named_when_jit_needs_a_hash(jit_mode):
    class Bag:
        def __init__(self, v, meta):
            self.v, self.meta = v, meta

    ea.register_pytree_node(Bag, lambda b: ((b.v,), b.meta), lambda meta, ch: Bag(ch[0], meta))
    if jit_mode == "eager":  # only jit hashes the structure
        g = ea.grad(lambda b: ea.sum(b.v**2))(Bag(np.array([1.0, 2.0]), ["a list"]))
        assert type(g) is Bag and g.meta == ["a list"]
        assert_close(g.v, [2.0, 4.0])
    with pytest.raises(TypeError, match="Bag is not hashable"):
        ea.jit(lambda b: b.v)(Bag(np.ones(1), ["unhashable"]))


def test_registration_overrides_the_built_in_handling():
    class Pair(namedtuple("Pair", "a b")):
        pass

    ea.register_pytree_node(Pair, lambda p: ((p.a,), float(p.b)), lambda b, ch: Pair(ch[0], b))
    g = ea.grad(lambda p: ea.sum(p.a**2) * p.b)(Pair(np.array([1.0, 2.0]), 3.0))
    assert type(g) is Pair and g.b == 3.0  # b is aux data: not differentiated
    assert_close(g.a, [6.0, 12.0])


def test_errors_and_gradcheck_name_leaves_by_their_path():
    with pytest.raises(TypeError, match=r"argument 0\.w"):
        ea.grad(lambda p: ea.sum(p.w * p.b))(Params(w=np.array([1, 2]), b=np.array(1.0)))

    def wrong(p):
        return ea.sum(p.w**2) + p.b * ea.stop_gradient(p.b)

    with pytest.raises(ea.GradcheckError, match=r"argument 0\.b"):
        ea.gradcheck(wrong, Params(w=np.array([1.0, 2.0]), b=np.array(0.5)))


def test_is_leaf_stops_flattening_at_the_nodes_it_picks_as_in_jax():
    tree = {"a": [1, 2], "b": ([3], {"c": (4, 5)}), "d": None}
    is_list = lambda x: isinstance(x, list)
    leaves, td = ea.tree_flatten(tree, is_leaf=is_list)
    assert leaves == [[1, 2], [3], 4, 5]  # the lists whole; the tuple's children flattened; None no leaf
    assert ea.tree_unflatten(td, leaves) == tree
    assert ea.tree_map(len, tree, is_leaf=lambda x: isinstance(x, (list, tuple))) == {
        "a": 2,
        "b": 2,
        "d": None,
    }
    # with several trees, each is flattened the same way
    got = ea.tree_map(lambda x, y: x + y, {"p": [1], "q": 2}, {"p": [3], "q": 4}, is_leaf=is_list)
    assert got == {"p": [1, 3], "q": 6}
    # is_leaf sees None too, and may take it for a leaf
    assert ea.tree_flatten([None, 1], is_leaf=lambda x: x is None)[0] == [None, 1]
    assert ea.tree_flatten(tree)[1] == ea.tree_flatten(tree, is_leaf=lambda x: False)[1]


def test_tree_leaves_and_tree_structure_are_jaxs():
    """jax.tree_util's two everyday helpers (absent before): the leaves in tree_flatten's
    order (dict keys sorted, None no leaf), and the structure that rebuilds the tree."""
    tree = {"w": [np.ones(2), 3.0], "b": (np.zeros(1), None), "a": 1}
    leaves = ea.tree_leaves(tree)
    assert [np.shape(x) for x in leaves] == [(), (1,), (2,), ()]
    assert leaves[0] == 1 and leaves[3] == 3.0
    structure = ea.tree_structure(tree)
    assert structure == ea.tree_flatten(tree)[1]
    rebuilt = ea.tree_unflatten(structure, [x * 2 for x in leaves])
    assert rebuilt["a"] == 2 and rebuilt["w"][1] == 6.0 and rebuilt["b"][1] is None
    assert ea.tree_leaves({"x": [1, 2]}, is_leaf=lambda n: isinstance(n, list)) == [[1, 2]]
    total = sum(
        ea.tree_leaves(ea.grad(lambda p: sum(ea.sum(x**2) for x in ea.tree_leaves(p)))({"u": np.ones(3)}))
    )
    assert_close(total, np.full(3, 2.0))


def test_tree_reduce_and_tree_all_are_jaxs():
    """jax.tree_util's folds over the leaves (absent before): reduce in tree_flatten's order,
    with or without an initializer; all of the leaves true (True for none)."""
    tree = {"b": (2.0, [3.0]), "a": 1.0}
    assert ea.tree_reduce(lambda acc, x: acc * 10 + x, tree) == 123.0  # a, then b's leaves
    assert ea.tree_reduce(lambda acc, x: acc + x, tree, 100.0) == 106.0
    assert ea.tree_reduce(lambda acc, x: acc + x, [], 0) == 0
    with pytest.raises(TypeError, match="initializer"):
        ea.tree_reduce(lambda acc, x: acc + x, {})
    assert ea.tree_all([True, (1, np.True_)]) and not ea.tree_all({"a": 0, "b": 1}) and ea.tree_all([])
    norm2 = ea.grad(lambda p: ea.tree_reduce(lambda acc, x: acc + ea.sum(x**2), p, 0.0))(
        {"u": np.arange(3.0)}
    )
    assert_close(norm2["u"], 2 * np.arange(3.0))
