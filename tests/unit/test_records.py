"""dltune.records against dataclasses: the same class body declared both ways behaves the same way
(construction and its errors, repr, equality, hashing, frozen instances, dataclasses' own helpers),
and what records do not support is refused where it is declared."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import sys
from typing import Any, ClassVar

import pytest

from dltune import records
from dltune.records import field, record


def declare(decorate: Any, frozen: bool) -> Any:
    """One class body, under ``decorate`` (dataclasses.dataclass or records.record)."""

    class Part:
        """A part with every kind of field."""

        name: str
        size: int = 0
        tags: list[str] = decorate.field(default_factory=list)
        note: str | None = decorate.field(default=None, compare=False)
        hidden: str = decorate.field(default="x", repr=False)

    return decorate.make(Part, frozen)


class Both:
    """The two decorators behind one face, so that each test runs the same body under each."""

    def __init__(self, make: Any, field: Any) -> None:
        self.make, self.field = make, field


DATACLASS = Both(lambda cls, frozen: dataclasses.dataclass(frozen=frozen)(cls), dataclasses.field)
RECORD = Both(lambda cls, frozen: record(frozen=frozen)(cls), field)


def outcome(call: Any) -> Any:
    """What a call gives: its value, or its exception's type and message."""
    try:
        return ("value", call())
    except Exception as exc:
        return (type(exc).__name__, str(exc).replace("Part.__init__()", "__init__()"))


@pytest.mark.parametrize("frozen", [True, False], ids=["frozen", "mutable"])
def test_a_record_behaves_as_the_same_dataclass(frozen: bool) -> None:
    Data, Rec = declare(DATACLASS, frozen), declare(RECORD, frozen)
    calls = [
        lambda cls: repr(cls("a", 2, ["t"], "n")),
        lambda cls: repr(cls(name="a")),
        lambda cls: cls("a") == cls("a"),
        lambda cls: cls("a", note="one") == cls("a", note="other"),  # note is not compared
        lambda cls: cls("a", hidden="one") == cls("a", hidden="other"),
        lambda cls: cls("a") == cls("b"),
        lambda cls: cls("a") == ("a", 0),
        lambda cls: cls("a").tags is not cls("a").tags,  # a factory per instance
        lambda cls: cls("a").tags,
        lambda cls: cls.size,  # a plain default stays a class attribute
        lambda cls: cls.hidden,  # and so does field(default=...)'s, not the field
        lambda cls: hasattr(cls, "tags"),  # a factory's does not
        lambda cls: cls(),
        lambda cls: cls("a", 1, [], None, "h", "extra"),
        lambda cls: cls("a", nope=1),
        lambda cls: cls("a", name="b"),
        lambda cls: hash(cls("a", 2)) == hash(cls("a", 2, note="other")),
        lambda cls: cls.__match_args__,
        lambda cls: [(f.name, f.default, f.compare, f.repr) for f in dataclasses.fields(cls)],
        lambda cls: dataclasses.is_dataclass(cls("a")),
        lambda cls: repr(dataclasses.replace(cls("a", 2), size=3)),
        lambda cls: dataclasses.replace(cls("a"), nope=3),
        lambda cls: dataclasses.asdict(cls("a", 2, ["t"])),
        lambda cls: list(inspect.signature(cls).parameters),
        lambda cls: pickle.loads(pickle.dumps(cls("a", 2))) == cls("a", 2),  # noqa: S301 - our own bytes
        lambda cls: copy.deepcopy(cls("a", 2, ["t"])) == cls("a", 2, ["t"]),
    ]
    for index, call in enumerate(calls):
        assert outcome(lambda: call(Rec)) == outcome(lambda: call(Data)), index  # noqa: B023 - run at once
    assert repr(records.replace(Rec("a", 2), size=3)) == repr(dataclasses.replace(Data("a", 2), size=3))


def test_a_frozen_record_refuses_assignment_and_deletion_as_a_frozen_dataclass_does() -> None:
    Data, Rec = declare(DATACLASS, True), declare(RECORD, True)
    for cls in (Data, Rec):
        instance = cls("a")
        with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'size'"):
            instance.size = 3
        with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'size'"):
            del instance.size
        assert instance.size == 0


def test_a_mutable_record_is_assignable_and_unhashable_as_a_mutable_dataclass_is() -> None:
    for cls in (declare(DATACLASS, False), declare(RECORD, False)):
        instance = cls("a")
        instance.size = 3
        assert instance.size == 3
        with pytest.raises(TypeError, match="unhashable"):
            hash(instance)


def test_what_a_record_does_not_support_is_refused_where_it_is_declared() -> None:
    with pytest.raises(TypeError, match=r"field 'limit': ClassVar\[int\] is not supported"):

        @record
        class WithClassVar:
            limit: ClassVar[int] = 3

    with pytest.raises(TypeError, match="__post_init__ is not supported"):

        @record
        class WithPostInit:
            size: int

            def __post_init__(self) -> None:
                pass

    with pytest.raises(ValueError, match="mutable default <class 'list'> for field tags"):

        @record
        class WithMutableDefault:
            tags: list[str] = []  # noqa: RUF012 - the refused declaration

    with pytest.raises(TypeError, match="non-default argument 'size' follows default argument"):

        @record
        class WithOrder:
            name: str = "a"
            size: int

    with pytest.raises(ValueError, match="cannot specify both default and default_factory"):
        field(default=1, default_factory=int)


def test_declarations_dataclasses_refuse_are_refused_too() -> None:
    @record(frozen=True)
    class Frozen:
        name: str

    with pytest.raises(TypeError, match="cannot inherit a frozen record"):

        @record
        class Thawed(Frozen):
            size: int = 0

    with pytest.raises(TypeError, match="'size' is a field but has no type annotation"):

        @record
        class Unannotated:
            size = field(default=0)

    with pytest.raises(TypeError, match="a frozen record cannot have its own __setattr__"):

        @record(frozen=True)
        class OwnSetattr:
            size: int

            def __setattr__(self, name: str, value: Any) -> None:
                pass

    @record
    class Mutable:
        size: int = 0

    # Unhashable, so maybe mutable: shared by every instance (dataclasses refuse it since 3.11).
    with pytest.raises(ValueError, match=r"mutable default .*Mutable.* for field inner"):

        @record
        class Holder:
            inner: Mutable = Mutable()


def test_a_hash_of_the_class_own_is_kept_as_dataclasses_keep_it() -> None:
    for decorate in (dataclasses.dataclass(frozen=True), record(frozen=True)):

        class Unhashable:
            size: int
            __hash__ = None  # type: ignore[assignment]

        made = decorate(Unhashable)
        with pytest.raises(TypeError, match="unhashable"):
            hash(made(1))


@pytest.mark.skipif(sys.version_info < (3, 13), reason="copy.replace is Python 3.13's")
def test_copy_replace_works_on_a_record() -> None:
    Rec = declare(RECORD, True)
    assert copy.replace(Rec("a", 2), size=3) == Rec("a", 3)  # type: ignore[attr-defined]


def test_an_inherited_records_fields_come_first_and_its_init_is_its_own() -> None:
    @record(frozen=True)
    class Base:
        name: str

    @record(frozen=True)
    class Derived(Base):
        size: int = 0

    assert Base("a") == Base("a")
    assert repr(Derived("a", 2)).endswith("<locals>.Derived(name='a', size=2)")
    assert Derived("a") != Base("a")
    assert Derived.__match_args__ == ("name", "size")


def test_no_module_of_dltune_builds_its_data_classes_with_dataclasses() -> None:
    """The point of records: dltune's data classes are records, so that no start pays for dataclasses'
    exec per method. Only records.py imports dataclasses (lazily, for its helpers), and the shared
    slurm.conf model, which Ansible's module_utils run on nodes without dltune."""
    import ast

    from tests.conftest import REPO_ROOT

    shared = {"records.py", "probes/slurm_conf_model.py"}
    importers = []
    for path in sorted((REPO_ROOT / "dltune").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if "dataclasses" in names:
                importers.append(str(path.relative_to(REPO_ROOT / "dltune")))
    assert sorted(set(importers) - shared) == []
    assert "records.py" in importers  # the scan does see an import of dataclasses
