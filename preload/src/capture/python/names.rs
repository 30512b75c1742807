//! The names `threading` gives threads (`Thread.name`), read from the interpreter's memory
//! for `pyigprof dump` (as py-spy's dump shows them).
//!
//! A name is found where `threading` itself keeps it: the interpreter's modules
//! (`sys.modules`) hold the `threading` module, whose globals hold `_active`, a dict from
//! each thread's ident (`threading.get_ident()`: the `pthread_t` that its thread state
//! keeps in `thread_id`) to its `Thread` — the main thread's `_MainThread`, a started
//! thread's own, the `_DummyThread` made for a thread `threading` did not start when it
//! was asked about — whose instance attribute `_name` is the name. The main thread's is
//! read like any other's, not assumed. A thread that `threading` does not know has none.
//!
//! The program runs on while this reads (it may also be hung, so nothing here locks or
//! calls into it): dicts are resized, objects freed. Every read is checked
//! ([`super::read`]), every size bounded, every object's type checked before its fields
//! are read, and the whole lookup is made twice: a name is returned only when both found
//! the same `Thread`, the same name object and the same text.
//!
//! How objects are read (checked, bounded, type-checked): [`super::objects`].
//! The `Thread` class is the one `threading`'s globals name so; a thread's object must
//! have it in its class's method resolution order.
//!
//! Version knowledge is in [`super::layout::ObjectLayout`].

use super::layout::MODULE_DICT;
use super::objects::{Builtin, Key, Reader};
use super::{read, Runtime};

impl Runtime {
    /// The `threading.Thread` name of the thread whose state is `tstate`; `None` when it
    /// has none or it cannot be read. Not from a signal handler (it allocates); it never
    /// locks, nor calls into the interpreter.
    pub fn python_thread_name(&self, tstate: u64) -> Option<String> {
        let objects = self.layout.objects.as_ref()?;
        let reader = Reader::new(objects, &self.layout, &self.types)?;
        let ident = read::word(tstate.checked_add(u64::from(self.layout.thread_id))?)?;
        let interp = read::word(tstate.checked_add(u64::from(objects.thread_interp))?)?;
        let first = reader.thread_name(interp, ident)?;
        (reader.thread_name(interp, ident)? == first).then_some(first.text)
    }
}

/// A thread's name as found: its `Thread` object, the name object and its text.
#[derive(Debug, PartialEq, Eq)]
struct Found {
    thread: u64,
    name: u64,
    text: String,
}

impl Reader<'_> {
    /// The name of the thread whose ident is `ident` in interpreter `interp`:
    /// `sys.modules["threading"]._active[ident]._name`.
    fn thread_name(&self, interp: u64, ident: u64) -> Option<Found> {
        let modules = read::word(interp.checked_add(u64::from(self.objects.interp_modules))?)?;
        let threading = self.item(modules, Key::Text("threading"))?;
        if !self.is(threading, Builtin::Module) {
            return None;
        }
        let globals = read::word(threading + MODULE_DICT)?;
        let class = self.item(globals, Key::Text("Thread"))?;
        let active = self.item(globals, Key::Text("_active"))?;
        let thread = self.item(active, Key::Int(ident))?;
        if !self.is_instance(thread, class)? {
            return None;
        }
        let name = self.attribute(thread, self.objects.thread_name)?;
        Some(Found {
            thread,
            name,
            text: self.text(name)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::python::code;
    use crate::capture::python::layout::StrModel;
    use crate::capture::python::layout::*;
    use crate::capture::python::ThreadStateSource;
    use std::ffi::CStr;

    /// The main thread's and a worker's idents (`pthread_t`s: 47-bit addresses, 2 digits).
    const MAIN: u64 = 0x7f3a_1c40_b740;
    const WORKER: u64 = 0x7f3a_1b3f_e6c0;
    const WORKER_NAME: &str = "запрос-обработчик-1";

    /// Objects laid out as one version lays them out, in the test's own memory.
    struct World {
        layout: Layout,
        o: ObjectLayout,
        blocks: Vec<Vec<u64>>,
        type_type: u64,
        text: u64,
        dict: u64,
        module: u64,
        int: u64,
        tuple: u64,
    }

    impl World {
        fn new(layout: Layout) -> World {
            let mut w = World {
                o: layout.objects.expect("an object layout"),
                layout,
                blocks: Vec::new(),
                type_type: 0,
                text: 0,
                dict: 0,
                module: 0,
                int: 0,
                tuple: 0,
            };
            w.type_type = w.alloc(128);
            w.put(w.type_type + 8, w.type_type);
            w.text = w.builtin(c"str", 64);
            w.dict = w.builtin(c"dict", 48);
            w.module = w.builtin(c"module", 24);
            w.int = w.builtin(c"int", 24);
            w.tuple = w.builtin(c"tuple", u64::from(w.o.tuple_items));
            w
        }

        /// `words` zeroed words of memory that live as long as the world.
        fn alloc(&mut self, words: usize) -> u64 {
            let mut block = vec![0u64; words];
            let at = block.as_mut_ptr() as u64;
            self.blocks.push(block);
            at
        }

        fn put(&self, at: u64, value: u64) {
            // SAFETY: inside a block of this world.
            unsafe { (at as *mut u64).write_unaligned(value) }
        }

        fn put_bytes(&self, at: u64, bytes: &[u8]) {
            // SAFETY: inside a block of this world.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len()) }
        }

        fn object(&mut self, ty: u64, words: usize) -> u64 {
            let at = self.alloc(words);
            self.put(at + 8, ty);
            at
        }

        fn builtin(&mut self, name: &'static CStr, size: u64) -> u64 {
            let ty = self.object(self.type_type, 128);
            self.put(ty + u64::from(self.o.type_name), name.as_ptr() as u64);
            self.put(ty + TP_BASICSIZE, size);
            ty
        }

        fn str(&mut self, text: &str) -> u64 {
            let units: Vec<u16> = text.encode_utf16().collect();
            let obj = self.object(self.text, 16 + text.len());
            let length = match self.layout.strings {
                StrModel::Bytes { .. } => text.len(),
                StrModel::Unicode { .. } => units.len(),
            };
            self.put(obj + OB_SIZE, length as u64);
            match self.layout.strings {
                StrModel::Bytes { data } => self.put_bytes(obj + u64::from(data), text.as_bytes()),
                StrModel::Unicode { .. } if text.is_ascii() => {
                    let StrModel::Unicode { ascii_data, .. } = self.layout.strings else {
                        unreachable!()
                    };
                    // compact, ascii, 1 byte per character
                    self.put(obj + 32, (1 << 5) | (1 << 6) | (1 << 2));
                    self.put_bytes(obj + u64::from(ascii_data), text.as_bytes());
                }
                StrModel::Unicode { compact_data, .. } => {
                    // compact, 2 bytes per character
                    self.put(obj + 32, (1 << 5) | (2 << 2));
                    let bytes: Vec<u8> = units.iter().flat_map(|u| u.to_le_bytes()).collect();
                    self.put_bytes(obj + u64::from(compact_data), &bytes);
                }
            }
            obj
        }

        fn int(&mut self, value: u64) -> u64 {
            let obj = self.object(self.int, 6);
            match self.o.int {
                IntLayout::Small { value: at } => self.put(obj + u64::from(at), value),
                IntLayout::Digits {
                    size,
                    digits,
                    tagged,
                } => {
                    let mask = (1 << LONG_DIGIT_BITS) - 1;
                    let n = (64 - value.leading_zeros() as u64).div_ceil(LONG_DIGIT_BITS);
                    self.put(obj + u64::from(size), if tagged { n << 3 } else { n });
                    for i in 0..n {
                        let digit = (value >> (LONG_DIGIT_BITS * i)) & mask;
                        let at = obj + u64::from(digits) + 4 * i;
                        self.put_bytes(at, &(digit as u32).to_le_bytes());
                    }
                }
            }
            obj
        }

        /// A keys object (3.6+) of `items`, with 1-byte indexes (left empty: lookups scan).
        fn keys(&mut self, items: &[(u64, u64)], kind: u8) -> u64 {
            let DictLayout::Compact { table, .. } = self.o.dict else {
                unreachable!()
            };
            let size = items.len().next_power_of_two().max(8) as u64;
            let keys = self.alloc(16 + size as usize * 4);
            let (first, shape) = match table {
                KeysLayout::Sized {
                    size: at,
                    nentries,
                    indices,
                } => {
                    self.put(keys + u64::from(at), size);
                    self.put(keys + u64::from(nentries), items.len() as u64);
                    (keys + u64::from(indices) + size, DICT_ENTRY)
                }
                KeysLayout::Log2 {
                    log2_size,
                    log2_index_bytes,
                    kind: at,
                    nentries,
                    indices,
                } => {
                    let log2 = size.trailing_zeros() as u8;
                    self.put_bytes(keys + u64::from(log2_size), &[log2]);
                    self.put_bytes(keys + u64::from(log2_index_bytes), &[log2]);
                    self.put_bytes(keys + u64::from(at), &[kind]);
                    self.put(keys + u64::from(nentries), items.len() as u64);
                    let shape = if kind == DICT_KEYS_GENERAL {
                        DICT_ENTRY
                    } else {
                        DICT_UNICODE_ENTRY
                    };
                    (keys + u64::from(indices) + size, shape)
                }
            };
            for (i, &(key, value)) in items.iter().enumerate() {
                let entry = first + i as u64 * shape.size;
                self.put(entry + shape.key, key);
                self.put(entry + shape.value, value);
            }
            keys
        }

        /// A dict of `items`: combined, or split over `shared` keys (3.6+).
        fn dict(&mut self, items: &[(u64, u64)], shared: Option<u64>) -> u64 {
            let dict = self.object(self.dict, 32);
            match self.o.dict {
                DictLayout::Open { mask, table } => {
                    let slots = (2 * items.len()).next_power_of_two().max(8);
                    let entries = self.alloc(3 * slots);
                    for (i, &(key, value)) in items.iter().enumerate() {
                        // Every other slot, as hashing leaves them.
                        let entry = entries + 2 * i as u64 * DICT_ENTRY.size;
                        self.put(entry + DICT_ENTRY.key, key);
                        self.put(entry + DICT_ENTRY.value, value);
                    }
                    self.put(dict + u64::from(mask), slots as u64 - 1);
                    self.put(dict + u64::from(table), entries);
                }
                DictLayout::Compact { keys, values, .. } => match shared {
                    None => {
                        let k = self.keys(items, DICT_KEYS_GENERAL);
                        self.put(dict + u64::from(keys), k);
                    }
                    Some(k) => {
                        let own: Vec<u64> = items.iter().map(|&(_, v)| v).collect();
                        let v = self.values(&own, None);
                        self.put(dict + u64::from(keys), k);
                        self.put(dict + u64::from(values), v);
                    }
                },
            }
            dict
        }

        /// Split values `values` (indexed as the shared keys), at `inline` when given.
        fn values(&mut self, values: &[u64], inline: Option<u64>) -> u64 {
            let n = values.len() as u64;
            let at = match self.o.values {
                SplitValues::Array => self.alloc(values.len()),
                SplitValues::Ordered => {
                    // An 8-byte prefix: its size, the count set, their indexes.
                    let at = self.alloc(1 + values.len()) + 8;
                    let order: Vec<u8> = (0..n as u8).rev().collect();
                    self.put_bytes(at - 2 - n, &order);
                    self.put_bytes(at - 2, &[n as u8, 8]);
                    at
                }
                SplitValues::Sized {
                    capacity, valid, ..
                } => {
                    let at = inline.unwrap_or_else(|| self.alloc(1 + values.len()));
                    self.put_bytes(at + u64::from(capacity), &[n as u8]);
                    self.put_bytes(at + u64::from(valid), &[1]);
                    at
                }
            };
            let first = match self.o.values {
                SplitValues::Sized { values, .. } => at + u64::from(values),
                _ => at,
            };
            for (i, &v) in values.iter().enumerate() {
                self.put(first + 8 * i as u64, v);
            }
            at
        }

        /// A class statement's type: MRO itself then `bases`, instances' keys `shared`.
        fn class(&mut self, bases: &[u64], shared: u64) -> u64 {
            let ty = self.object(self.type_type, 128);
            let mut flags = TPFLAGS_HEAPTYPE;
            let mut size = 16;
            match self.o.instance {
                InstanceDict::Offset => {
                    self.put(ty + TP_DICTOFFSET, 16);
                    size = 32;
                }
                InstanceDict::Managed {
                    flag,
                    values,
                    cached_keys,
                    ..
                } => {
                    flags |= flag;
                    if let ManagedValues::Inline { flag } = values {
                        flags |= flag;
                    }
                    self.put(ty + u64::from(cached_keys), shared);
                }
            }
            self.put(ty + u64::from(self.o.type_flags), flags);
            self.put(ty + TP_BASICSIZE, size);
            let mro = self.object(self.tuple, 8);
            self.put(mro + OB_SIZE, 1 + bases.len() as u64);
            let items = mro + u64::from(self.o.tuple_items);
            for (i, &class) in std::iter::once(&ty).chain(bases).enumerate() {
                self.put(items + 8 * i as u64, class);
            }
            self.put(ty + TP_MRO, mro);
            ty
        }

        /// An instance of `class` with attributes `attrs` (keyed as the `shared` keys), in
        /// a dict when `in_dict`, else as its own values where the version keeps them so.
        fn instance(
            &mut self,
            class: u64,
            shared: u64,
            attrs: &[(u64, u64)],
            in_dict: bool,
        ) -> u64 {
            // 4 words of pre-header, the object (2), inline values (1 + attributes).
            let obj = self.alloc(8 + attrs.len()) + 32;
            self.put(obj + 8, class);
            let own: Vec<u64> = attrs.iter().map(|&(_, v)| v).collect();
            match self.o.instance {
                InstanceDict::Offset => {
                    let compact = matches!(self.o.dict, DictLayout::Compact { .. });
                    let split = (!in_dict && compact).then_some(shared);
                    let dict = self.dict(attrs, split);
                    self.put(obj + 16, dict);
                }
                InstanceDict::Managed { dict_before, .. } if in_dict => {
                    let dict = self.dict(attrs, None);
                    self.put(obj - u64::from(dict_before), dict);
                }
                InstanceDict::Managed {
                    dict_before,
                    values,
                    ..
                } => match values {
                    ManagedValues::Pointer { before } => {
                        let v = self.values(&own, None);
                        self.put(obj - u64::from(before), v);
                    }
                    ManagedValues::Tagged => {
                        let v = self.values(&own, None);
                        self.put(obj - u64::from(dict_before), v - 1);
                    }
                    ManagedValues::Inline { .. } => {
                        self.values(&own, Some(obj + 16));
                    }
                },
            }
            obj
        }

        /// `sys.modules` holding `threading`, whose `_active` holds a main thread named
        /// in a dict and a worker named in its own values (split, where the version has
        /// them).
        fn threads(&mut self) -> Threads {
            let (name, ident) = (self.str(self.o.thread_name), self.str("_ident"));
            let shared = match self.o.dict {
                DictLayout::Open { .. } => 0,
                DictLayout::Compact { .. } => self.keys(&[(ident, 0), (name, 0)], DICT_KEYS_SPLIT),
            };
            let object = self.builtin(c"object", 16);
            let thread = self.class(&[object], shared);
            let main_thread = self.class(&[thread, object], shared);
            let (main_ident, worker_ident) = (self.int(MAIN), self.int(WORKER));
            let main_name = self.str("MainThread");
            let attrs = [(ident, main_ident), (name, main_name)];
            let main = self.instance(main_thread, shared, &attrs, true);
            let worker_name = self.str(WORKER_NAME);
            let attrs = [(ident, worker_ident), (name, worker_name)];
            let worker = self.instance(thread, shared, &attrs, false);
            let active = self.dict(&[(main_ident, main), (worker_ident, worker)], None);
            let keys = ["__name__", "Thread", "_active"].map(|k| self.str(k));
            let module_name = self.str("threading");
            let items = [(keys[0], module_name), (keys[1], thread), (keys[2], active)];
            let globals = self.dict(&items, None);
            let threading = self.object(self.module, 4);
            self.put(threading + MODULE_DICT, globals);
            let sys = self.str("sys");
            let modules = self.dict(&[(sys, globals), (module_name, threading)], None);
            let interp = self.alloc(usize::from(self.o.interp_modules) / 8 + 1);
            self.put(interp + u64::from(self.o.interp_modules), modules);
            let [main_state, worker_state] = [MAIN, WORKER].map(|id| {
                let tstate = self.alloc(64);
                self.put(tstate + u64::from(self.layout.thread_id), id);
                self.put(tstate + u64::from(self.o.thread_interp), interp);
                tstate
            });
            let types = code::Types {
                code: 1,
                text: self.text,
                bytes: 1,
            };
            let runtime = Runtime::new(
                self.layout,
                &[(1, 2)],
                types,
                ThreadStateSource::AttachedKey,
            )
            .expect("a runtime");
            Threads {
                main: main_state,
                worker: worker_state,
                runtime,
                worker_thread: worker,
                shared,
                object,
            }
        }
    }

    /// What [`World::threads`] made.
    struct Threads {
        /// The thread states.
        main: u64,
        worker: u64,
        runtime: Runtime,
        /// The worker's `Thread` object.
        worker_thread: u64,
        /// The keys shared by `Thread`s.
        shared: u64,
        /// The type `object`.
        object: u64,
    }

    impl Threads {
        fn names(&self) -> (Option<String>, Option<String>) {
            (
                self.runtime.python_thread_name(self.main),
                self.runtime.python_thread_name(self.worker),
            )
        }
    }

    /// The layout of `major.minor`; 3.13+ with 3.12's frames (not read here).
    fn layout(major: u8, minor: u8) -> Layout {
        Layout::for_version(major, minor).unwrap_or(Layout {
            version: (major, minor),
            objects: ObjectLayout::for_version(major, minor),
            ..Layout::for_version(3, 12).unwrap()
        })
    }

    #[test]
    fn each_version_s_objects_give_the_main_thread_s_and_a_worker_s_names() {
        for (major, minor) in [(2, 7), (3, 6), (3, 10), (3, 11), (3, 12), (3, 13), (3, 15)] {
            let mut world = World::new(layout(major, minor));
            let t = world.threads();
            let named = (
                Some("MainThread".to_string()),
                Some(WORKER_NAME.to_string()),
            );
            assert_eq!(t.names(), named, "{major}.{minor}");
            // A thread `threading` does not know.
            world.put(t.worker + u64::from(world.layout.thread_id), WORKER + 8);
            assert_eq!(t.names(), (named.0, None), "{major}.{minor}");
        }
    }

    #[test]
    fn an_object_not_as_expected_gives_no_name() {
        let world = |minor: u8| {
            let mut world = World::new(layout(3, minor));
            let t = world.threads();
            assert!(t.names().0.is_some() && t.names().1.is_some(), "3.{minor}");
            (world, t)
        };
        // A dict type of another name; a heap type named dict.
        let (w, t) = world(13);
        w.put(w.dict + u64::from(w.o.type_name), c"dicx".as_ptr() as u64);
        assert_eq!(t.names(), (None, None));
        let (w, t) = world(13);
        w.put(w.dict + u64::from(w.o.type_flags), TPFLAGS_HEAPTYPE);
        assert_eq!(t.names(), (None, None));
        // A worker whose class does not have `Thread` in its MRO.
        let (mut w, t) = world(13);
        let other = w.class(&[t.object], t.shared);
        w.put(t.worker_thread + 8, other);
        assert_eq!(t.names().1, None);
        // Shared keys that are not a split table's; an index larger than the table; a
        // table of 2^200 entries.
        let (w, t) = world(13);
        let KeysLayout::Log2 {
            kind,
            log2_index_bytes,
            log2_size,
            ..
        } = keys_layout(&w)
        else {
            unreachable!()
        };
        w.put_bytes(t.shared + u64::from(kind), &[DICT_KEYS_GENERAL]);
        assert_eq!(t.names().1, None);
        w.put_bytes(t.shared + u64::from(kind), &[DICT_KEYS_SPLIT]);
        w.put_bytes(t.shared + u64::from(log2_index_bytes), &[7]);
        assert_eq!(t.names().1, None);
        w.put_bytes(t.shared + u64::from(log2_size), &[200]);
        w.put_bytes(t.shared + u64::from(log2_index_bytes), &[201]);
        assert_eq!(t.names().1, None);
        // 3.13: inline values a dict took over (not valid), and no dict.
        let (w, t) = world(13);
        w.put_bytes(t.worker_thread + 16 + 3, &[0]);
        assert_eq!(t.names().1, None);
        // 3.12: values whose insertion order does not list the name's entry (1).
        let (w, t) = world(12);
        let tagged = read::word(t.worker_thread - 24).unwrap();
        assert_eq!(tagged & 1, 1, "values, not a dict");
        let values = tagged + 1;
        w.put_bytes(values - 2, &[1]);
        w.put_bytes(values - 3, &[0]);
        assert_eq!(t.names().1, None);
        w.put_bytes(values - 3, &[1]);
        assert_eq!(t.names().1.as_deref(), Some(WORKER_NAME));
    }

    /// How the world's keys objects are laid out (3.6+).
    fn keys_layout(w: &World) -> KeysLayout {
        let DictLayout::Compact { table, .. } = w.o.dict else {
            unreachable!()
        };
        table
    }
}
