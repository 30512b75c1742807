//! Reading the interpreter's objects from outside it: dicts (their keys and values),
//! modules, instance attributes, ints, strs, type checks — for `pyigprof dump` (the names
//! `threading` gives threads: [`super::names`]; asyncio's tasks before 3.14:
//! [`super::tasks`]), from a thread of pyigprof's while the program runs on (or hangs).
//!
//! Nothing here locks or calls into the interpreter: every read is checked
//! ([`super::read`]), every size bounded, every object's type checked before its fields
//! are read. Type objects: the str type is the runtime's ([`super::code::Types`], from its
//! exported symbol) and `type` is its type. Dicts, modules, ints and tuples are recognised
//! by their type being a static type (no `Py_TPFLAGS_HEAPTYPE`) whose type is `type`,
//! named so (`tp_name`) and large enough for the fields read. Their symbols (`PyDict_Type`,
//! …) are exported by every build here, Debian's static stripped 3.11 included, but are not
//! looked up: `dlsym` takes the dynamic loader's lock, which a hung program may hold.
//!
//! Version knowledge is in [`super::layout::ObjectLayout`].

use super::code;
use super::layout::{
    DictEntry, DictLayout, InstanceDict, IntLayout, KeysLayout, Layout, ManagedValues,
    ObjectLayout, SplitValues, DICT_ENTRY, DICT_KEYS_GENERAL, DICT_KEYS_SPLIT, DICT_UNICODE_ENTRY,
    LONG_DIGIT_BITS, MODULE_DICT, OB_SIZE, TPFLAGS_HEAPTYPE, TP_BASICSIZE, TP_DICTOFFSET, TP_MRO,
};
use super::layout::{SET_ENTRY, SET_MASK, SET_TABLE};
use super::read;
use std::cell::Cell;

/// Most items of a set, or entries of a dict, looked at.
pub(super) const MAX_ITEMS: u64 = 1 << 16;

/// Most entries of a dict looked through (`sys.modules` has hundreds, `_active` one per
/// thread).
pub(super) const MAX_ENTRIES: u64 = 1 << 20;
/// Most classes in the method resolution order of a class.
const MAX_MRO: u64 = 64;
/// Longest str returned, in characters: a longer one is not returned (rather than cut).
pub(super) const MAX_TEXT: u64 = 4096;

/// A key looked up in a dict.
#[derive(Clone, Copy)]
pub(super) enum Key<'k> {
    /// A str key (ASCII).
    Text(&'k str),
    /// An int key.
    Int(u64),
}

/// The static types recognised by name.
#[derive(Clone, Copy)]
pub(super) enum Builtin {
    Dict,
    Module,
    Int,
    Tuple,
    Set,
}

/// A dict's entries: `count` of shape `shape` from `first`.
pub(super) struct Entries {
    first: u64,
    count: u64,
    shape: DictEntry,
    /// `dk_kind` (3.11+).
    kind: Option<u8>,
}

/// Reads objects of one interpreter with one [`ObjectLayout`].
pub(super) struct Reader<'a> {
    pub(super) objects: &'a ObjectLayout,
    pub(super) layout: &'a Layout,
    pub(super) types: &'a code::Types,
    /// `PyType_Type`.
    type_type: u64,
    /// The type object found to be each [`Builtin`] (0: none yet).
    known: [Cell<u64>; 6],
}

impl<'a> Reader<'a> {
    /// `None` when `type`, the str type's type, is not its own type.
    pub(super) fn new(
        objects: &'a ObjectLayout,
        layout: &'a Layout,
        types: &'a code::Types,
    ) -> Option<Self> {
        let type_type = read::type_of(types.text)?;
        (read::type_of(type_type)? == type_type).then(|| Reader {
            objects,
            layout,
            types,
            type_type,
            known: Default::default(),
        })
    }
    /// `tp_flags` of the type object at `ty`.
    pub(super) fn flags(&self, ty: u64) -> Option<u64> {
        read::word(ty + u64::from(self.objects.type_flags))
    }

    /// Whether the object at `obj` is a `builtin` (exactly: not of a subclass).
    pub(super) fn is(&self, obj: u64, builtin: Builtin) -> bool {
        let Some(ty) = read::type_of(obj) else {
            return false;
        };
        let known = &self.known[builtin as usize];
        if ty != 0 && known.get() == ty {
            return true;
        }
        // Its name, and the size its fields read need.
        let (name, size): (&[u8], u16) = match builtin {
            Builtin::Dict => match self.objects.dict {
                DictLayout::Open { mask, table } => (b"dict\0", mask.max(table) + 8),
                DictLayout::Compact { keys, values, .. } => (b"dict\0", keys.max(values) + 8),
            },
            Builtin::Module => (b"module\0", MODULE_DICT as u16 + 8),
            Builtin::Int => match self.objects.int {
                IntLayout::Small { value } => (b"int\0", value + 8),
                IntLayout::Digits { digits, .. } => (b"int\0", digits),
            },
            Builtin::Tuple => (b"tuple\0", self.objects.tuple_items),
            Builtin::Set => (b"set\0", SET_TABLE + 8),
        };
        let mut buf = [0u8; 8];
        let named = read::word(ty + u64::from(self.objects.type_name))
            .and_then(|at| read::bytes(at, name.len(), &mut buf))
            .is_some_and(|()| &buf[..name.len()] == name);
        let ok = named
            && read::type_of(ty) == Some(self.type_type)
            && self.flags(ty).is_some_and(|f| f & TPFLAGS_HEAPTYPE == 0)
            && read::word(ty + TP_BASICSIZE).is_some_and(|s| s >= u64::from(size));
        if ok {
            known.set(ty);
        }
        ok
    }

    /// Whether `obj`'s class has `class`, a class statement's (heap) type, in its method
    /// resolution order.
    pub(super) fn is_instance(&self, obj: u64, class: u64) -> Option<bool> {
        let heap = |ty: u64| self.flags(ty).is_some_and(|f| f & TPFLAGS_HEAPTYPE != 0);
        let ty = read::type_of(obj)?;
        if read::type_of(class)? != self.type_type || !heap(class) || !heap(ty) {
            return Some(false);
        }
        let mro = read::word(ty + TP_MRO)?;
        if !self.is(mro, Builtin::Tuple) {
            return Some(false);
        }
        let n = read::word(mro + OB_SIZE)?;
        if n > MAX_MRO {
            return Some(false);
        }
        let items = mro + u64::from(self.objects.tuple_items);
        for i in 0..n {
            if read::word(items + 8 * i)? == class {
                return Some(true);
            }
        }
        Some(false)
    }

    /// The value of `key` in the dict at `dict`.
    pub(super) fn item(&self, dict: u64, key: Key) -> Option<u64> {
        if !self.is(dict, Builtin::Dict) {
            return None;
        }
        let found = match self.objects.dict {
            DictLayout::Open { mask, table } => {
                let mask = read::word(dict + u64::from(mask))?;
                let table = read::word(dict + u64::from(table))?;
                if mask >= MAX_ENTRIES || !(mask + 1).is_power_of_two() {
                    return None;
                }
                let entries = Entries {
                    first: table,
                    count: mask + 1,
                    shape: DICT_ENTRY,
                    kind: None,
                };
                self.find(&entries, key, true)?.1
            }
            DictLayout::Compact { keys, values, .. } => {
                let values = read::word(dict + u64::from(values))?;
                let entries = self.entries(read::word(dict + u64::from(keys))?)?;
                let (ix, value) = self.find(&entries, key, values == 0)?;
                if values == 0 {
                    value
                } else {
                    self.split_value(values, ix)?
                }
            }
        };
        (found != 0).then_some(found)
    }

    /// The entries of the keys object at `keys` (3.6+).
    pub(super) fn entries(&self, keys: u64) -> Option<Entries> {
        let DictLayout::Compact { table, .. } = self.objects.dict else {
            return None;
        };
        let at = |offset: u16| keys.checked_add(u64::from(offset));
        match table {
            KeysLayout::Sized {
                size,
                nentries,
                indices,
            } => {
                let size = read::word(at(size)?)?;
                let count = read::word(at(nentries)?)?;
                if !size.is_power_of_two() || size > MAX_ENTRIES || count > size {
                    return None;
                }
                let width = match size {
                    0..=0xff => 1,
                    0x100..=0xffff => 2,
                    0x1_0000..=0xffff_ffff => 4,
                    _ => 8,
                };
                Some(Entries {
                    first: at(indices)? + size * width,
                    count,
                    shape: DICT_ENTRY,
                    kind: None,
                })
            }
            KeysLayout::Log2 {
                log2_size,
                log2_index_bytes,
                kind,
                nentries,
                indices,
            } => {
                let log2 = u64::from(read::byte(at(log2_size)?)?);
                let index_bytes = u64::from(read::byte(at(log2_index_bytes)?)?);
                let kind = read::byte(at(kind)?)?;
                let count = read::word(at(nentries)?)?;
                // Indexes of 1, 2, 4 or 8 bytes.
                if log2 > u64::from(MAX_ENTRIES.trailing_zeros())
                    || !(log2..=log2 + 3).contains(&index_bytes)
                    || kind > DICT_KEYS_SPLIT
                    || count > 1 << log2
                {
                    return None;
                }
                Some(Entries {
                    first: at(indices)? + (1 << index_bytes),
                    count,
                    shape: if kind == DICT_KEYS_GENERAL {
                        DICT_ENTRY
                    } else {
                        DICT_UNICODE_ENTRY
                    },
                    kind: Some(kind),
                })
            }
        }
    }

    /// The first entry whose key is `key` (and whose value is set, when `valued`): its
    /// index and value.
    pub(super) fn find(&self, entries: &Entries, key: Key, valued: bool) -> Option<(u64, u64)> {
        let shape = entries.shape;
        for ix in 0..entries.count {
            let entry = entries.first.checked_add(ix * shape.size)?;
            let candidate = read::word(entry + shape.key)?;
            if candidate == 0 || !self.key_is(candidate, key) {
                continue;
            }
            let value = read::word(entry + shape.value)?;
            if value != 0 || !valued {
                return Some((ix, value));
            }
        }
        None
    }

    /// Value `ix` of the split table values at `values`; `None` when it is not this
    /// table's or is not set.
    pub(super) fn split_value(&self, values: u64, ix: u64) -> Option<u64> {
        let value = match self.objects.values {
            SplitValues::Array => read::word(values.checked_add(8 * ix)?)?,
            SplitValues::Ordered => {
                let set = u64::from(read::byte(values.checked_sub(2)?)?);
                let prefix = u64::from(read::byte(values - 1)?);
                let mut order = (1..=set).map(|k| values.checked_sub(2 + k).and_then(read::byte));
                if set + 2 > prefix || !order.any(|i| i.map(u64::from) == Some(ix)) {
                    return None;
                }
                read::word(values + 8 * ix)?
            }
            SplitValues::Sized {
                capacity,
                values: at,
                ..
            } => {
                if ix >= u64::from(read::byte(values + u64::from(capacity))?) {
                    return None;
                }
                read::word(values + u64::from(at) + 8 * ix)?
            }
        };
        (value != 0).then_some(value)
    }

    /// The instance attribute `name` of the object at `obj` (a class statement's instance).
    pub(super) fn attribute(&self, obj: u64, name: &str) -> Option<u64> {
        let ty = read::type_of(obj)?;
        let flags = self.flags(ty)?;
        let key = Key::Text(name);
        match self.objects.instance {
            InstanceDict::Managed {
                flag,
                dict_before,
                values,
                cached_keys,
            } if flags & flag != 0 => {
                let slot = obj.checked_sub(u64::from(dict_before))?;
                let own = match values {
                    ManagedValues::Pointer { before } => {
                        read::word(obj.checked_sub(u64::from(before))?)?
                    }
                    ManagedValues::Tagged => match read::word(slot)? {
                        tagged if tagged & 1 == 1 => tagged + 1,
                        _ => 0,
                    },
                    ManagedValues::Inline { flag } if flags & flag != 0 => {
                        let inline = obj.checked_add(read::word(ty + TP_BASICSIZE)?)?;
                        let SplitValues::Sized { valid, .. } = self.objects.values else {
                            return None;
                        };
                        match read::byte(inline + u64::from(valid))? {
                            0 => 0,
                            _ => inline,
                        }
                    }
                    ManagedValues::Inline { .. } => 0,
                };
                if own == 0 {
                    return self.item(read::word(slot)?, key);
                }
                // Values without a dict: the keys are the class's shared ones.
                if flags & TPFLAGS_HEAPTYPE == 0 {
                    return None;
                }
                let entries = self.entries(read::word(ty + u64::from(cached_keys))?)?;
                if entries.kind != Some(DICT_KEYS_SPLIT) {
                    return None;
                }
                let (ix, _) = self.find(&entries, key, false)?;
                self.split_value(own, ix)
            }
            _ => {
                let offset = read::word(ty + TP_DICTOFFSET)?;
                let size = read::word(ty + TP_BASICSIZE)?;
                // A negative offset (from a variable-size object's end) is not read.
                if offset == 0 || offset.checked_add(8)? > size {
                    return None;
                }
                self.item(read::word(obj.checked_add(offset)?)?, key)
            }
        }
    }

    /// Whether the object at `obj` is the key `key`.
    pub(super) fn key_is(&self, obj: u64, key: Key) -> bool {
        match key {
            Key::Text(want) => {
                let mut buf = [0u8; 32];
                let Some(buf) = buf.get_mut(..want.len()) else {
                    return false;
                };
                read::has_type(obj, self.types.text)
                    && read::word(obj + OB_SIZE) == Some(want.len() as u64)
                    && code::read_text(obj, self.layout, self.types, buf) == Some(want.len())
                    && *buf == *want.as_bytes()
            }
            Key::Int(want) => self.int(obj) == Some(want),
        }
    }

    /// The value of the int at `obj`, when it is a non-negative one that fits 64 bits.
    pub(super) fn int(&self, obj: u64) -> Option<u64> {
        if !self.is(obj, Builtin::Int) {
            return None;
        }
        match self.objects.int {
            IntLayout::Small { value } => read::word(obj + u64::from(value)),
            IntLayout::Digits {
                size,
                digits,
                tagged,
            } => {
                let word = read::word(obj + u64::from(size))?;
                let count = match tagged {
                    true if word & 3 == 0 => word >> 3,
                    true => return None,
                    false => word,
                };
                // 64 bits take at most 3 digits of 30; a negative count (≤ 3.11) is huge.
                if count == 0 || count > 64_u64.div_ceil(LONG_DIGIT_BITS) {
                    return None;
                }
                let mut value: u128 = 0;
                for i in 0..count {
                    let digit = read::uint(obj + u64::from(digits) + 4 * i)?;
                    if u64::from(digit) >> LONG_DIGIT_BITS != 0 {
                        return None;
                    }
                    value |= u128::from(digit) << (LONG_DIGIT_BITS * i);
                }
                u64::try_from(value).ok()
            }
        }
    }

    /// Calls `f` with each value of the dict at `dict` (a combined table's), at most
    /// [`MAX_ITEMS`], until it returns false; `None` when it is not a dict or a read
    /// fails. Allocates nothing: async-signal-safe when `f` is.
    pub(super) fn for_each_dict_value(
        &self,
        dict: u64,
        mut f: impl FnMut(u64) -> bool,
    ) -> Option<()> {
        if !self.is(dict, Builtin::Dict) {
            return None;
        }
        let DictLayout::Compact { keys, values, .. } = self.objects.dict else {
            return None;
        };
        if read::word(dict + u64::from(values))? != 0 {
            return None;
        }
        let entries = self.entries(read::word(dict + u64::from(keys))?)?;
        let shape = entries.shape;
        for ix in 0..entries.count.min(MAX_ITEMS) {
            let entry = entries.first.checked_add(ix * shape.size)?;
            if read::word(entry + shape.key)? == 0 {
                continue;
            }
            let value = read::word(entry + shape.value)?;
            if value != 0 && !f(value) {
                break;
            }
        }
        Some(())
    }

    /// Calls `f` with each item of the set at `set` (deleted entries' keys too: the caller
    /// tells them apart by type), at most [`MAX_ITEMS`], until it returns false; `None`
    /// when it is not a set or a read fails. Allocates nothing: async-signal-safe when `f`
    /// is.
    pub(super) fn for_each_set_item(&self, set: u64, mut f: impl FnMut(u64) -> bool) -> Option<()> {
        if !self.is(set, Builtin::Set) {
            return None;
        }
        let mask = read::word(set + u64::from(SET_MASK))?;
        let table = read::word(set + u64::from(SET_TABLE))?;
        if mask >= MAX_ITEMS || !(mask + 1).is_power_of_two() {
            return None;
        }
        for i in 0..=mask {
            let key = read::word(table.checked_add(i * SET_ENTRY)?)?;
            if key != 0 && !f(key) {
                break;
            }
        }
        Some(())
    }

    /// Whether `ty` is `class` or has it in its method resolution order (either may be a
    /// static type).
    pub(super) fn is_subclass(&self, ty: u64, class: u64) -> bool {
        if ty == class {
            return true;
        }
        let Some(mro) = read::word(ty + TP_MRO) else {
            return false;
        };
        if !self.is(mro, Builtin::Tuple) {
            return false;
        }
        let n = read::word(mro + OB_SIZE).unwrap_or(0).min(MAX_MRO);
        let items = mro + u64::from(self.objects.tuple_items);
        (0..n).any(|i| read::word(items + 8 * i) == Some(class))
    }

    /// The text of the str at `obj`, whole.
    pub(super) fn text(&self, obj: u64) -> Option<String> {
        if !read::has_type(obj, self.types.text) {
            return None;
        }
        let length = read::word(obj + OB_SIZE)?;
        if length > MAX_TEXT {
            return None;
        }
        // 4 bytes of UTF-8 at most per character: nothing is cut.
        let mut out = vec![0u8; 4 * length as usize];
        let n = code::read_text(obj, self.layout, self.types, &mut out)?;
        out.truncate(n);
        Some(
            String::from_utf8(out)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
        )
    }
}
