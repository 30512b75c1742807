//! How functions are shown to users: demangled native symbols and Python locations.
//!
//! Native names in a dump are the symbols of `.symtab`/`.dynsym`, mangled for C++ and
//! Rust (docs/dump-format.md, "What a function is"); they are demangled here.
//!
//! Python functions are recognised by their file, whose functions are either all Python
//! code or all native code ([`Profile::is_python_code`]): a file is Python when its name
//! says so ([`is_python_file`]: a Python source `*.py`, `*.pyw`, or a pseudo-file such as
//! `<frozen importlib._bootstrap>` or `<string>` of `exec`), or when one of its functions
//! has a name that only Python code objects have ([`is_python_code_name`]: `<module>`,
//! `<lambda>`, `f.<locals>.g`, …), as for a script without an extension such as a
//! virtualenv's `bin/pytest`. Native objects never are: symbols cannot contain `<`.

use crate::profile::{Function, Profile};

/// Whether the name of `file` shows that its functions are Python code (then their start
/// is a line number): it ends in `.py` or `.pyw`, or is a pseudo-file `<…>` (`<string>`
/// of `exec`, `<frozen importlib._bootstrap>`, `<stdin>`, IPython's `<ipython-input-…>`).
pub fn is_python_file(file: &str) -> bool {
    file.ends_with(".py")
        || file.ends_with(".pyw")
        || (file.starts_with('<') && file.ends_with('>'))
}

/// Whether `name` is one that only CPython's compiler gives code objects: a qualified
/// name whose last part is `<module>`, `<lambda>`, `<genexpr>`, `<listcomp>`,
/// `<dictcomp>` or `<setcomp>`, or that goes through a function's locals
/// (`outer.<locals>.inner`). The profiler's own pseudo-functions (`<unknown code>`,
/// `<truncated stack>`) are not such names.
pub fn is_python_code_name(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    matches!(
        last,
        "<module>" | "<lambda>" | "<genexpr>" | "<listcomp>" | "<dictcomp>" | "<setcomp>"
    ) || name.contains(".<locals>.")
}

/// Whether `file` is the CPython interpreter itself: a `libpython*.so*` shared library
/// (`libpython3.11.so.1.0`, `libpython3.13t.so`), or a `python` executable
/// (`python`, `python3`, `python3.11`, `python3.12d`, `python3.13t`, `python2.7-dbg`),
/// e.g. Debian's `/usr/bin/python3.11`, which links the interpreter in statically.
/// Extension modules (`zlib.cpython-311-x86_64-linux-gnu.so`) and other libraries are
/// not the interpreter.
pub fn is_interpreter_file(file: &str) -> bool {
    let base = file.rsplit('/').next().unwrap_or(file);
    if let Some(rest) = base.strip_prefix("libpython") {
        return rest.contains(".so");
    }
    let Some(rest) = base.strip_prefix("python") else {
        return false;
    };
    let rest = rest.strip_suffix("-dbg").unwrap_or(rest);
    // A version (digits and dots), then ABI flags (d, m, t, u) at most.
    let flags = rest.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
    flags.len() <= 2 && flags.chars().all(|c| matches!(c, 'd' | 'm' | 't' | 'u'))
}

/// Whether functions of `file` are frames of Python code for the Python view
/// ([`crate::view`]): Python code ([`Profile::is_python_code`]) or pyigprof's
/// `<unknown code>` in the pseudo-file `[python]` (a Python frame whose code object could
/// not be read).
pub fn is_python_frame_file(profile: &Profile, file: crate::profile::FileId) -> bool {
    profile.is_python_code(file) || profile.file(file) == "[python]"
}

/// `name` demangled if it is a Rust (legacy `_ZN...E` or v0 `_R...`) or C++ (`_Z...`)
/// symbol, otherwise unchanged. Rust hashes (`::h0123456789abcdef`) are left out.
pub fn demangle(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return format!("{rust:#}");
    }
    if name.starts_with("_Z") || name.starts_with("__Z") {
        if let Ok(symbol) = cpp_demangle::Symbol::new(name.as_bytes()) {
            if let Ok(text) = symbol.demangle() {
                return text;
            }
        }
    }
    name.to_string()
}

/// Template argument lists nested in another one are shown as `<…>` when their text is
/// longer than this ([`short_name`]).
pub const NESTED_TEMPLATE_WIDTH: usize = 16;
/// Outermost template argument lists are shown as `<…>` when their text (with nested
/// lists already elided) is longer than this ([`short_name`]).
pub const TEMPLATE_WIDTH: usize = 48;
/// Parameter lists are shown as `(…)` when their text is longer than this, or names a
/// template type ([`short_name`]).
pub const PARAMETERS_WIDTH: usize = 40;

/// `name` as the tables (`--top`, `--text`, `--tree`) show it: a C++ symbol demangled
/// without its return type (`foo<int>(int)`, not `void foo<int>(int)`), its template
/// argument lists shown as `<…>` when longer than [`NESTED_TEMPLATE_WIDTH`] (nested in
/// another list) or [`TEMPLATE_WIDTH`] (outermost), its parameter list as `(…)` when
/// longer than [`PARAMETERS_WIDTH`] or when it names a template type (as
/// `std::string const&` is `std::__cxx11::basic_string<char, …> const&`), and `> >`
/// written `>>`:
/// `_ZNSt6vectorISt4pairIidESaIS1_EE9push_backERKS1_` is
/// `std::vector<std::pair<int, double>, std::allocator<…>>::push_back(…)`. Other names
/// are [`demangle`]d (exports keep that full name).
pub fn short_name(name: &str) -> String {
    if rustc_demangle::try_demangle(name).is_ok()
        || !(name.starts_with("_Z") || name.starts_with("__Z"))
    {
        return demangle(name);
    }
    let options = cpp_demangle::DemangleOptions::new().no_return_type();
    match cpp_demangle::Symbol::new(name.as_bytes())
        .ok()
        .and_then(|symbol| symbol.demangle_with_options(&options).ok())
    {
        Some(text) => elide_cpp(&text).unwrap_or(text),
        None => name.to_string(),
    }
}

/// A bracketed part of a demangled C++ name being read by [`elide_cpp`].
struct Group {
    /// `<` or `(`.
    open: char,
    /// The text inside, as shown so far.
    text: String,
    /// How many template argument lists enclose this one (0 for outermost ones).
    depth: usize,
}

/// `text`, a demangled C++ name, with long template argument and parameter lists
/// elided as [`short_name`] says; `None` when its brackets do not pair up as expected
/// (then it is shown whole).
fn elide_cpp(text: &str) -> Option<String> {
    // Characters of an operator's name after `operator` (`operator<<`, `operator->`).
    const OPERATOR: &str = "<>=!+-*/%&|^~,[]";
    let mut stack: Vec<Group> = vec![Group {
        open: ' ',
        text: String::new(),
        depth: 0,
    }];
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let top = stack.last_mut()?;
        match c {
            '<' | '(' => {
                if c == '(' && text[at..].starts_with("(anonymous namespace)") {
                    top.text.push_str("(anonymous namespace)");
                    for _ in 1.."(anonymous namespace)".len() {
                        chars.next();
                    }
                    continue;
                }
                let templates = stack.iter().filter(|g| g.open == '<').count();
                stack.push(Group {
                    open: c,
                    text: String::new(),
                    depth: templates,
                });
            }
            '>' | ')' => {
                let group = stack.pop()?;
                if stack.is_empty() || group.open != if c == '>' { '<' } else { '(' } {
                    return None;
                }
                let limit = match (group.open, group.depth) {
                    ('(', _) => PARAMETERS_WIDTH,
                    (_, 0) => TEMPLATE_WIDTH,
                    _ => NESTED_TEMPLATE_WIDTH,
                };
                // `std::allocator<int> >`: the space before `>` goes.
                let inner = group.text.trim_end();
                let templated = group.open == '(' && inner.contains('<');
                let inner = if templated || inner.chars().count() > limit {
                    "…"
                } else {
                    inner
                };
                let outer = stack.last_mut()?;
                outer.text.push(group.open);
                outer.text.push_str(inner);
                outer.text.push(c);
            }
            '{' => {
                // `{lambda(int)#1}`, `{unnamed type#1}`: as they are.
                let end = at + text[at..].find('}')?;
                top.text.push_str(&text[at..=end]);
                while chars.peek().is_some_and(|&(next, _)| next <= end) {
                    chars.next();
                }
            }
            _ => {
                top.text.push(c);
                let word = top.text.strip_suffix("operator").is_some_and(|before| {
                    !before.ends_with(|c: char| c.is_alphanumeric() || c == '_')
                });
                if word {
                    while let Some(&(next_at, next)) = chars.peek() {
                        let paren = text[next_at..].starts_with("()");
                        if !(OPERATOR.contains(next) || paren) {
                            break;
                        }
                        top.text.push(next);
                        chars.next();
                        if paren {
                            top.text.push(')');
                            chars.next();
                            break;
                        }
                    }
                }
            }
        }
    }
    match stack.pop() {
        Some(group) if stack.is_empty() => Some(group.text),
        _ => None,
    }
}

/// How one function is shown in reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// The function name: demangled for native code, the qualified name for Python.
    pub name: String,
    /// Where it is: `file:first-line` for Python, the object's full path for native code.
    pub location: String,
    /// The name as the tables (`--top`, `--text`, `--tree`) show it: [`short_name`] for
    /// native code, the same as `name` for Python.
    pub short: String,
    /// Whether the function is Python code.
    pub python: bool,
    /// For native code named from debug information: where the function starts in its
    /// source, `file:line` ([`Function::source`]).
    pub source: Option<String>,
}

impl Label {
    /// The label of every function of `profile`, indexed by function id.
    pub fn all(profile: &Profile) -> Vec<Label> {
        profile
            .functions()
            .iter()
            .map(|function| Label::of(profile, function))
            .collect()
    }

    /// How `function` of `profile` is shown.
    pub fn of(profile: &Profile, function: &Function) -> Label {
        let file = profile.file(function.file);
        if profile.is_python_code(function.file) {
            Label {
                name: function.name.clone(),
                short: function.name.clone(),
                location: format!("{file}:{}", function.start),
                python: true,
                source: None,
            }
        } else {
            Label {
                name: demangle(&function.name),
                short: short_name(&function.name),
                location: file.to_string(),
                python: false,
                source: function.source.clone(),
            }
        }
    }

    /// The short form used in stacks (collapsed stacks, flame graphs): `name (file:line)`
    /// for Python, `name [object file name]` for native code (`deflate [libz.so.1]`).
    /// Stack separators are replaced: `;` by `,` and line breaks and other control
    /// characters by `?`, so that the result is one frame of a `a;b;c 12` line.
    /// An empty name is shown as `[unnamed]`.
    pub fn frame(&self) -> String {
        let name = if self.name.is_empty() {
            "[unnamed]"
        } else {
            &self.name
        };
        let text = if self.python {
            format!("{name} ({})", self.location)
        } else {
            let object = self.location.rsplit('/').next().unwrap_or(&self.location);
            format!("{name} [{object}]")
        };
        text.chars()
            .map(|c| match c {
                ';' => ',',
                c if c.is_control() => '?',
                c => c,
            })
            .collect()
    }

    /// One-line form: `name (file:line)` for Python, `name  (object path)` for native
    /// code, `name  (object path; source:line)` when the source is known.
    pub fn line(&self) -> String {
        self.line_with(&self.name)
    }

    /// [`Label::line`] with the short name ([`Label::short`]), as tables show it.
    pub fn short_line(&self) -> String {
        self.line_with(&self.short)
    }

    fn line_with(&self, name: &str) -> String {
        match (self.python, &self.source) {
            (true, _) => format!("{name} ({})", self.location),
            (false, None) => format!("{name}  ({})", self.location),
            (false, Some(source)) => format!("{name}  ({}; {source})", self.location),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_cpp_and_rust() {
        assert_eq!(demangle("_ZN5space3fooEibc"), "space::foo(int, bool, char)");
        assert_eq!(
            demangle("_ZNSt6vectorIiSaIiEE9push_backERKi"),
            "std::vector<int, std::allocator<int> >::push_back(int const&)"
        );
        assert_eq!(
            demangle("_ZN3std2rt10lang_start17h0123456789abcdefE"),
            "std::rt::lang_start"
        );
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
    }

    #[test]
    fn short_names_of_cpp_functions() {
        let vector = "_ZNSt6vectorISt4pairIidESaIS1_EE9push_backERKS1_";
        assert_eq!(
            demangle(vector),
            "std::vector<std::pair<int, double>, std::allocator<std::pair<int, double> > >::push_back(std::pair<int, double> const&)"
        );
        assert_eq!(
            short_name(vector),
            "std::vector<std::pair<int, double>, std::allocator<…>>::push_back(…)"
        );
        // No return type.
        assert_eq!(demangle("_Z3fooIiEvT_"), "void foo<int>(int)");
        assert_eq!(short_name("_Z3fooIiEvT_"), "foo<int>(int)");
        // std::map<std::string, std::vector<int>>::find: the outermost list is too long.
        let find = "_ZNSt3mapINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESt6vectorIiSaIiEESt4lessIS5_ESaISt4pairIKS5_S8_EEE4findERSC_";
        assert!(demangle(find).len() > 200, "{}", demangle(find));
        assert_eq!(short_name(find), "std::map<…>::find(…)");
        // Short lists stay; operators and lambdas are read as such.
        assert_eq!(
            short_name("_ZN5space3fooEibc"),
            "space::foo(int, bool, char)"
        );
        assert_eq!(
            short_name("_ZN8geometry4areaERKNS_5ShapeEi"),
            "geometry::area(geometry::Shape const&, int)"
        );
        // A std::string parameter is a template type: (…).
        assert_eq!(
            short_name("_ZN4text5countERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"),
            "text::count(…)"
        );
        assert_eq!(
            short_name("_ZNSt6vectorIiSaIiEEixEm"),
            "std::vector<int, std::allocator<int>>::operator[](unsigned long)"
        );
        assert_eq!(
            short_name("_ZlsRSoRK3Foo"),
            "operator<<(std::ostream&, Foo const&)"
        );
        assert_eq!(short_name("_ZlsRSoRKSt6vectorIiSaIiEE"), "operator<<(…)");
        assert_eq!(
            short_name("_ZZ4mainENKUliE_clEi"),
            "main::{lambda(int)#1}::operator()(int) const"
        );
        assert_eq!(
            short_name("_ZN12_GLOBAL__N_16helperEv"),
            "(anonymous namespace)::helper()"
        );
        // Rust, C and names that are not symbols: as demangle gives them.
        for name in [
            "_ZN3std2rt10lang_start17h0123456789abcdefE",
            "_RNvCs1234_7mycrate3foo",
            "deflate_slow",
            "@?0x13adab",
            "_Zgarbage(",
            "",
        ] {
            assert_eq!(short_name(name), demangle(name), "{name}");
        }
    }

    #[test]
    fn unpaired_brackets_show_the_whole_name() {
        for text in ["a<b", "a>b", "f(int", "f)(", "x<y)", "a{b"] {
            assert_eq!(elide_cpp(text), None, "{text}");
        }
        assert_eq!(
            elide_cpp("operator->(A)"),
            Some("operator->(A)".to_string())
        );
        assert_eq!(
            elide_cpp("my_operator<int>"),
            Some("my_operator<int>".to_string())
        );
    }

    #[test]
    fn tables_show_short_names_exports_full_ones() {
        let mut profile = Profile::new();
        let so = profile.intern_file("/lib/libfoo.so").unwrap();
        let vector = "_ZNSt6vectorISt4pairIidESaIS1_EE9push_backERKS1_";
        let id = profile.intern_function(vector, so, 0x10).unwrap();
        let label = Label::of(&profile, profile.function(id));
        assert_eq!(label.name, demangle(vector));
        assert_eq!(
            label.short_line(),
            "std::vector<std::pair<int, double>, std::allocator<…>>::push_back(…)  (/lib/libfoo.so)"
        );
        assert_eq!(
            label.line(),
            format!("{}  (/lib/libfoo.so)", demangle(vector))
        );
    }

    #[test]
    fn leaves_plain_and_odd_names_alone() {
        for name in [
            "deflate_slow",
            "@?0x13adab",
            "main",
            "_Z",
            "_Zgarbage(",
            "",
            "<module>",
        ] {
            assert_eq!(demangle(name), name);
        }
    }

    #[test]
    fn python_files() {
        assert!(is_python_file("/work/examples/compress.py"));
        assert!(is_python_file("<frozen importlib._bootstrap>"));
        assert!(!is_python_file("/usr/lib/x86_64-linux-gnu/libz.so.1"));
        assert!(!is_python_file("ls"));
        assert!(is_python_file("<string>"));
        assert!(!is_python_file("[python]"));
    }

    #[test]
    fn python_code_names() {
        for name in [
            "<module>",
            "<lambda>",
            "Klass.<lambda>",
            "f.<locals>.<genexpr>",
            "f.<locals>.inner",
            "<listcomp>",
            "<dictcomp>",
            "<setcomp>",
        ] {
            assert!(is_python_code_name(name), "{name}");
        }
        for name in [
            "main",
            "Klass.method",
            "<unknown code>",
            "<truncated stack>",
            "@?0x13adab",
            "_ZN3foo3barEv",
            "<locals>",
        ] {
            assert!(!is_python_code_name(name), "{name}");
        }
    }

    #[test]
    fn extensionless_script_with_a_module_is_python() {
        let mut profile = Profile::new();
        let script = profile.intern_file("/venv/bin/tool").unwrap();
        let helper = profile.intern_function("helper", script, 3).unwrap();
        let binary = profile.intern_file("/usr/bin/python3").unwrap();
        let main = profile.intern_function("main", binary, 0x1130).unwrap();
        // Before `<module>` is seen, nothing says the script is Python.
        assert!(!profile.is_python_code(script));
        profile.intern_function("<module>", script, 1).unwrap();
        assert!(profile.is_python_code(script));
        assert!(!profile.is_python_code(binary));
        let lines: Vec<String> = [helper, main]
            .iter()
            .map(|&id| Label::of(&profile, profile.function(id)).line())
            .collect();
        assert_eq!(
            lines,
            ["helper (/venv/bin/tool:3)", "main  (/usr/bin/python3)"]
        );
    }

    #[test]
    fn interpreter_files() {
        for file in [
            "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0",
            "/usr/lib/x86_64-linux-gnu/libpython3.12.so",
            "/opt/py/lib/libpython3.13t.so.1.0",
            "/usr/bin/python3.11",
            "/root/.pyenv/versions/3.11.7/bin/python3.11",
            "/usr/local/bin/python3",
            "/usr/bin/python",
            "/usr/bin/python3.12d",
            "/usr/bin/python2.7-dbg",
            "python3.11",
        ] {
            assert!(is_interpreter_file(file), "{file}");
        }
        for file in [
            "/root/.pyenv/versions/3.11.7/lib/python3.11/lib-dynload/zlib.cpython-311-x86_64-linux-gnu.so",
            "/lib/x86_64-linux-gnu/libz.so.1",
            "/lib/x86_64-linux-gnu/libcrypto.so.3",
            "/usr/lib/libc.so.6",
            "/usr/lib/python3.12/runpy.py",
            "/usr/bin/python3-config",
            "/usr/bin/pythonista",
            "/opt/python3.11/lib/libfoo.so",
            "/usr/lib/libpython3.11.a",
            "[python]",
            "<frozen site>",
        ] {
            assert!(!is_interpreter_file(file), "{file}");
        }
    }

    #[test]
    fn frame_labels_are_one_frame_of_a_stack() {
        let mut profile = Profile::new();
        let py = profile.intern_file("/work/a;b.py").unwrap();
        let so = profile.intern_file("/lib/libz.so.1").unwrap();
        let f = profile.intern_function("f\nx", py, 3).unwrap();
        let g = profile.intern_function("deflate", so, 0x10).unwrap();
        let h = profile.intern_function("odd\n;name", so, 0x20).unwrap();
        let empty = profile.intern_function("", so, 0x30).unwrap();
        let frame = |id| Label::of(&profile, profile.function(id)).frame();
        assert_eq!(frame(f), "f?x (/work/a,b.py:3)");
        assert_eq!(frame(g), "deflate [libz.so.1]");
        assert_eq!(frame(h), "odd?,name [libz.so.1]");
        assert_eq!(frame(empty), "[unnamed] [libz.so.1]");
    }

    #[test]
    fn label_lines() {
        let mut profile = Profile::new();
        let py = profile.intern_file("/work/x.py").unwrap();
        let so = profile.intern_file("/lib/libfoo.so").unwrap();
        let f = profile.intern_function("Klass.method", py, 12).unwrap();
        let g = profile
            .intern_function("_ZN3foo3barEv", so, 0x1000)
            .unwrap();
        assert_eq!(
            Label::of(&profile, profile.function(f)).line(),
            "Klass.method (/work/x.py:12)"
        );
        assert_eq!(
            Label::of(&profile, profile.function(g)).line(),
            "foo::bar()  (/lib/libfoo.so)"
        );
    }
}
