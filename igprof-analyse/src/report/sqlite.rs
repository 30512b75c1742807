//! `--sqlite=FILE`: the profile as an SQLite database to query with SQL (`sqlite3 FILE`,
//! Python's `sqlite3`, Datasette, …); `--sqlite` or `-s` without a file (IgProf's
//! spelling): the same database as SQL text on stdout, for `| sqlite3 FILE`
//! ([`write_sql`]). docs/analyser.md ("SQLite") has the schema with example queries;
//! [`SCHEMA`] is its SQL.
//!
//! - `profile`: one row: the counter, its unit (`ticks`, `bytes` for the memory
//!   counters, `events` for the sampled event counters such as `PERF_PAGE_FAULTS`,
//!   `amount`) and total, the tick period, the view, `--value`, the analyser's
//!   arguments and, for memory counters, the mean bytes between recorded allocations
//!   (`rate_bytes`: 1 when every allocation is recorded, more for estimates from
//!   sampling), and the number of observations behind the shares (`sample_size`:
//!   [`Measure::sample_size`]);
//! - `sources`: the dumps read (path, program, pid, tick period);
//! - `files`, `functions`: every function with a cost, its shown name (demangled,
//!   Python's qualified name), its symbol as in the dump, file, whether it is Python and
//!   (Python) its first line;
//! - `nodes`: the call tree (as [`CallTree`]: one node per function per call path,
//!   offsets merged), each node with its parent, depth, and self and cumulative samples,
//!   amount (ticks) and seconds;
//! - `function_costs`: per function its self and cumulative samples, amount, seconds and
//!   percent (cumulative: each sample once, even where the function recurses), its rank
//!   by cumulative amount (as `--text`'s `[n]`) and its number of call paths;
//! - `calls`: the call graph: per (caller, callee) the samples, amount, seconds and
//!   percent of the samples whose stack has that call, and its number of call paths;
//! - `summary`: a view of `function_costs` with the functions' names and files.
//!
//! Seconds are amount × tick period, `NULL` for counters that are not ticks; percents
//! are of the counter's total. Each percent has its 95 % confidence interval
//! ([`Measure::interval`]: `*_ci_low`, `*_ci_high` in percent, `NULL` where shares have
//! no sampling error), computed with the n of `profile.sample_size`.

use std::fs::File;
use std::path::Path;

use rusqlite::{params, Connection};

use super::{cumulative_counts, paths, Arcs, CallTree, FunctionAmounts, Measure, Options, Unit};
use crate::error::Error;
use crate::profile::{FileId, FunctionId, Profile};
use crate::symbol::Label;

/// The database's tables, view and indices.
pub const SCHEMA: &str = "
CREATE TABLE profile (
    counter TEXT NOT NULL,
    unit TEXT NOT NULL,
    tick_period_s REAL NOT NULL,
    total_samples INTEGER NOT NULL,
    total_amount INTEGER NOT NULL,
    total_seconds REAL,
    view TEXT NOT NULL,
    value TEXT NOT NULL,
    hidden_nodes INTEGER NOT NULL,
    arguments TEXT NOT NULL,
    creator TEXT NOT NULL,
    rate_bytes REAL,
    sample_size REAL
);
CREATE TABLE sources (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    program TEXT NOT NULL,
    pid INTEGER NOT NULL,
    tick_period_s REAL NOT NULL
);
CREATE TABLE files (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    python INTEGER NOT NULL
);
CREATE TABLE functions (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    symbol TEXT NOT NULL,
    file_id INTEGER NOT NULL REFERENCES files(id),
    python INTEGER NOT NULL,
    line INTEGER
);
CREATE TABLE nodes (
    id INTEGER PRIMARY KEY,
    parent_id INTEGER REFERENCES nodes(id),
    function_id INTEGER NOT NULL REFERENCES functions(id),
    depth INTEGER NOT NULL,
    self_samples INTEGER NOT NULL,
    self_amount INTEGER NOT NULL,
    self_seconds REAL,
    cum_samples INTEGER NOT NULL,
    cum_amount INTEGER NOT NULL,
    cum_seconds REAL,
    self_ci_low REAL,
    self_ci_high REAL,
    cum_ci_low REAL,
    cum_ci_high REAL
);
CREATE TABLE function_costs (
    function_id INTEGER PRIMARY KEY REFERENCES functions(id),
    rank INTEGER NOT NULL,
    self_samples INTEGER NOT NULL,
    self_amount INTEGER NOT NULL,
    self_seconds REAL,
    self_percent REAL NOT NULL,
    cum_samples INTEGER NOT NULL,
    cum_amount INTEGER NOT NULL,
    cum_seconds REAL,
    cum_percent REAL NOT NULL,
    paths INTEGER NOT NULL,
    self_ci_low REAL,
    self_ci_high REAL,
    cum_ci_low REAL,
    cum_ci_high REAL
);
CREATE TABLE calls (
    caller_id INTEGER REFERENCES functions(id),
    callee_id INTEGER NOT NULL REFERENCES functions(id),
    samples INTEGER NOT NULL,
    amount INTEGER NOT NULL,
    seconds REAL,
    percent REAL NOT NULL,
    paths INTEGER NOT NULL,
    ci_low REAL,
    ci_high REAL
);
CREATE VIEW summary AS
    SELECT c.rank, f.name, fi.path AS file, f.line, f.python,
           c.self_samples, c.self_amount, c.self_seconds, c.self_percent,
           c.cum_samples, c.cum_amount, c.cum_seconds, c.cum_percent, c.paths,
           f.id AS function_id,
           c.self_ci_low, c.self_ci_high, c.cum_ci_low, c.cum_ci_high
    FROM function_costs c
    JOIN functions f ON f.id = c.function_id
    JOIN files fi ON fi.id = f.file_id;
CREATE INDEX nodes_parent ON nodes(parent_id);
CREATE INDEX nodes_function ON nodes(function_id);
CREATE INDEX calls_caller ON calls(caller_id);
CREATE INDEX calls_callee ON calls(callee_id);
";

/// What the `profile` row records beyond the profile itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    /// `python` or `all-frames`.
    pub view: String,
    /// `normal` or `peak` (`--value`).
    pub value: String,
    /// The analyser's command-line arguments, space-separated.
    pub arguments: String,
}

/// A cost as stored: samples, amount (ticks), seconds (`None` unless ticks), percent
/// and its 95 % interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// Samples (or calls).
    pub samples: i64,
    /// In the counter's unit.
    pub amount: i64,
    /// amount × tick period, for ticks.
    pub seconds: Option<f64>,
    /// Of the counter's total.
    pub percent: f64,
    /// The 95 % confidence interval of `percent`, (low, high) in percent
    /// ([`Measure::interval`]); `None` where shares have no sampling error.
    pub interval: Option<(f64, f64)>,
}

/// A row of `functions` and `function_costs`.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionRow {
    /// The function's id (as in the profile).
    pub id: FunctionId,
    /// How it is shown.
    pub label: Label,
    /// Its name as in the dump.
    pub symbol: String,
    /// Its file.
    pub file: FileId,
    /// Python: its first line.
    pub line: Option<i64>,
    /// Rank by cumulative amount, from 1.
    pub rank: usize,
    /// Self cost.
    pub own: Cost,
    /// Cumulative cost.
    pub cumulative: Cost,
    /// In how many places of the call tree it is.
    pub paths: i64,
}

/// A row of `calls`.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRow {
    /// The caller, `None` for outermost frames.
    pub caller: Option<FunctionId>,
    /// The callee.
    pub callee: FunctionId,
    /// The cost of the samples with this call.
    pub cost: Cost,
    /// In how many places of the call tree the call is.
    pub paths: i64,
}

/// Everything the database holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Database {
    /// The counter and its total.
    pub measure: Measure,
    /// The call tree.
    pub tree: CallTree,
    /// The functions with a cost, by rank.
    pub functions: Vec<FunctionRow>,
    /// The calls with a cost.
    pub calls: Vec<CallRow>,
    /// The files of the functions: (id, path, python).
    pub files: Vec<(FileId, String, bool)>,
}

/// Computes the database's content for `options.counter` in `profile` (the limit and
/// order do not apply).
///
/// # Errors
/// [`Error::Report`] if the profile has counters but not `options.counter`. A profile
/// without any counter gives empty tables.
pub fn compute(profile: &Profile, options: &Options) -> Result<Database, Error> {
    let (measure, counter) = Measure::select(profile, &options.counter)?;
    let tree = CallTree::of(profile, counter);
    let mut database = Database {
        measure,
        tree,
        functions: Vec::new(),
        calls: Vec::new(),
        files: Vec::new(),
    };
    let Some(counter) = counter else {
        return Ok(database);
    };
    let measure = &database.measure;
    let cost = |samples: i64, amount: i64| Cost {
        samples,
        amount,
        seconds: (measure.unit == Unit::Ticks).then(|| measure.seconds(amount)),
        percent: super::percent(amount, measure.total.amount),
        interval: measure.interval(amount, samples),
    };
    let amounts = FunctionAmounts::of(profile, counter);
    let (function_paths, arc_paths) = paths(profile, &database.tree);
    let mut order: Vec<FunctionId> = (0..profile.functions().len() as FunctionId)
        .filter(|&id| function_paths[id as usize] > 0)
        .collect();
    let labels: Vec<Label> = Label::all(profile);
    amounts.rank(&mut order, &labels);
    let mut file_seen = vec![false; profile.files().len()];
    for (position, &id) in order.iter().enumerate() {
        let function = profile.function(id);
        let label = labels[id as usize].clone();
        if !std::mem::replace(&mut file_seen[function.file as usize], true) {
            database.files.push((
                function.file,
                profile.file(function.file).to_string(),
                profile.is_python_code(function.file),
            ));
        }
        let own = amounts.self_values[id as usize];
        database.functions.push(FunctionRow {
            id,
            line: label.python.then_some(function.start),
            label,
            symbol: function.name.clone(),
            file: function.file,
            rank: position + 1,
            own: cost(own.count, own.amount),
            cumulative: cost(
                amounts.cumulative_counts[id as usize],
                amounts.cumulative[id as usize],
            ),
            paths: function_paths[id as usize],
        });
    }
    let arcs = Arcs::of(profile, counter);
    for (index, &(caller, callee)) in arcs.pairs.iter().enumerate() {
        let Some(&paths) = arc_paths.get(&(caller, callee)) else {
            continue;
        };
        database.calls.push(CallRow {
            caller,
            callee,
            cost: cost(arcs.counts[index], arcs.amounts[index]),
            paths,
        });
    }
    Ok(database)
}

/// Writes `database` into a new SQLite database at `path` (an existing file is
/// replaced), with the `profile` row made from `profile`, `settings` and the database's
/// measure.
///
/// # Errors
/// [`Error::Write`] naming `path` when the file cannot be created or written.
pub fn write(
    profile: &Profile,
    database: &Database,
    settings: &Settings,
    path: &Path,
) -> Result<(), Error> {
    let failed = |detail: String| Error::Write {
        file: path.display().to_string(),
        detail,
    };
    // Creating (and emptying) the file first gives the operating system's reason when
    // it cannot be written, and turns an existing file into an empty database.
    File::create(path).map_err(|error| failed(error.to_string()))?;
    let mut connection = Connection::open(path).map_err(|error| failed(error.to_string()))?;
    fill(&mut connection, profile, database, settings).map_err(|error| failed(error.to_string()))
}

/// Writes the database as SQL text to `out`, as `sqlite3 FILE .dump` would: the tables'
/// `CREATE` statements and one `INSERT` per row, then the indexes and views, in one
/// transaction, so that `pyigprof-analyse -s p.gz | sqlite3 p.db` makes the database
/// [`write()`] makes.
///
/// # Errors
/// [`Error::Write`] (for `<stdout>`) if SQLite fails.
pub fn write_sql(
    profile: &Profile,
    database: &Database,
    settings: &Settings,
    out: &mut dyn std::io::Write,
) -> Result<(), Error> {
    let failed = |detail: String| Error::Write {
        file: "<stdout>".to_string(),
        detail,
    };
    let dump = || -> rusqlite::Result<String> {
        let mut connection = Connection::open_in_memory()?;
        fill(&mut connection, profile, database, settings)?;
        let mut text = String::from("PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\n");
        let schema: Vec<(String, String, String)> = connection
            .prepare("SELECT type, name, sql FROM sqlite_master WHERE sql NOT NULL ORDER BY rowid")?
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        for (_, table, sql) in schema.iter().filter(|(kind, ..)| kind == "table") {
            text.push_str(sql);
            text.push_str(";\n");
            let columns: Vec<String> = connection
                .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))?
                .query_map([], |row| row.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            let values = columns
                .iter()
                .map(|column| format!("quote(\"{column}\")"))
                .collect::<Vec<_>>()
                .join(" || ',' || ");
            let mut rows =
                connection.prepare(&format!("SELECT {values} FROM \"{table}\" ORDER BY rowid"))?;
            let inserts = rows.query_map([], |row| row.get::<_, String>(0))?;
            for values in inserts {
                text.push_str(&format!("INSERT INTO \"{table}\" VALUES({});\n", values?));
            }
        }
        for (_, _, sql) in schema.iter().filter(|(kind, ..)| kind != "table") {
            text.push_str(sql);
            text.push_str(";\n");
        }
        text.push_str("COMMIT;\n");
        Ok(text)
    };
    let text = dump().map_err(|error| failed(error.to_string()))?;
    out.write_all(text.as_bytes())
        .map_err(|error| failed(error.to_string()))
}

/// Creates the schema and inserts every row, in one transaction.
fn fill(
    connection: &mut Connection,
    profile: &Profile,
    database: &Database,
    settings: &Settings,
) -> rusqlite::Result<()> {
    connection.execute_batch("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;")?;
    let transaction = connection.transaction()?;
    transaction.execute_batch(SCHEMA)?;
    let measure = &database.measure;
    let ticks = measure.unit == Unit::Ticks;
    let seconds = |amount: i64| ticks.then(|| measure.seconds(amount));
    let low = |interval: Option<(f64, f64)>| interval.map(|(low, _)| low);
    let high = |interval: Option<(f64, f64)>| interval.map(|(_, high)| high);
    transaction.execute(
        "INSERT INTO profile VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        params![
            measure.counter,
            measure.unit.name(),
            measure.tick_period,
            measure.total.count,
            measure.total.amount,
            seconds(measure.total.amount),
            settings.view,
            settings.value,
            profile.hidden_nodes as i64,
            settings.arguments,
            format!("{} {}", crate::error::PROGRAM, env!("CARGO_PKG_VERSION")),
            measure.rate_bytes(),
            measure.sample_size(),
        ],
    )?;
    {
        let mut insert = transaction.prepare("INSERT INTO sources VALUES (?1, ?2, ?3, ?4, ?5)")?;
        for (id, source) in profile.sources.iter().enumerate() {
            insert.execute(params![
                id as i64,
                source.path,
                source.program,
                source.pid as i64,
                source.tick_period
            ])?;
        }
        let mut insert = transaction.prepare("INSERT INTO files VALUES (?1, ?2, ?3)")?;
        for (id, path, python) in &database.files {
            insert.execute(params![id, path, python])?;
        }
        let mut function =
            transaction.prepare("INSERT INTO functions VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?;
        let mut costs = transaction.prepare(
            "INSERT INTO function_costs VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        )?;
        for row in &database.functions {
            function.execute(params![
                row.id,
                row.label.name,
                row.symbol,
                row.file,
                row.label.python,
                row.line
            ])?;
            costs.execute(params![
                row.id,
                row.rank as i64,
                row.own.samples,
                row.own.amount,
                row.own.seconds,
                row.own.percent,
                row.cumulative.samples,
                row.cumulative.amount,
                row.cumulative.seconds,
                row.cumulative.percent,
                row.paths,
                low(row.own.interval),
                high(row.own.interval),
                low(row.cumulative.interval),
                high(row.cumulative.interval)
            ])?;
        }
        let mut insert =
            transaction.prepare("INSERT INTO calls VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)")?;
        for row in &database.calls {
            insert.execute(params![
                row.caller,
                row.callee,
                row.cost.samples,
                row.cost.amount,
                row.cost.seconds,
                row.cost.percent,
                row.paths,
                low(row.cost.interval),
                high(row.cost.interval)
            ])?;
        }
        let mut insert = transaction
            .prepare("INSERT INTO nodes VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)")?;
        let counts = cumulative_counts(&database.tree);
        for (id, node) in database.tree.nodes.iter().enumerate() {
            let own = measure.interval(node.self_values.amount, node.self_values.count);
            let cumulative = measure.interval(node.cumulative, counts[id]);
            insert.execute(params![
                id as i64,
                node.parent,
                node.function,
                node.depth as i64,
                node.self_values.count,
                node.self_values.amount,
                seconds(node.self_values.amount),
                counts[id],
                node.cumulative,
                seconds(node.cumulative),
                low(own),
                high(own),
                low(cumulative),
                high(cumulative)
            ])?;
        }
    }
    transaction.commit()
}

#[cfg(test)]
mod tests {
    use super::super::testing::load;
    use super::*;

    const RECURSIVE: &[u8] = include_bytes!("../../tests/data/recursive-hex.txt");

    #[test]
    fn recursive_dump_queries() {
        let profile = load("rec.txt", RECURSIVE);
        let database = compute(&profile, &Options::default()).unwrap();
        let dir = std::env::temp_dir().join(format!("pyigprof-sqlite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rec.sqlite");
        // An existing file is replaced.
        std::fs::write(&path, b"not a database").unwrap();
        write(&profile, &database, &Settings::default(), &path).unwrap();
        let connection = Connection::open(&path).unwrap();
        let query = |sql: &str| -> Vec<String> {
            let mut statement = connection.prepare(sql).unwrap();
            let columns = statement.column_count();
            statement
                .query_map([], |row| {
                    let cells: Vec<String> = (0..columns)
                        .map(|i| match row.get_ref(i).unwrap() {
                            rusqlite::types::ValueRef::Null => "NULL".to_string(),
                            rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                            rusqlite::types::ValueRef::Real(v) => format!("{v:.3}"),
                            rusqlite::types::ValueRef::Text(t) => {
                                String::from_utf8_lossy(t).into_owned()
                            }
                            rusqlite::types::ValueRef::Blob(_) => "blob".to_string(),
                        })
                        .collect();
                    Ok(cells.join("|"))
                })
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        assert_eq!(
            query("SELECT counter, unit, total_samples, total_amount, total_seconds FROM profile"),
            ["PERF_TICKS|ticks|13|24|0.096"]
        );
        // fib: self 8 ticks in 2 + 1 + 3 = 6 samples, cumulative 16 ticks counted once
        // (10 samples), on 3 call paths (the three depths of its recursion).
        assert_eq!(
            query("SELECT rank, name, file, line, self_samples, self_amount, cum_samples, cum_amount, paths FROM summary WHERE name = 'fib'"),
            ["3|fib|/work/rec.py|10|6|8|10|16|3"]
        );
        assert_eq!(
            query("SELECT f.name, c.amount, c.samples, c.paths FROM calls c JOIN functions f ON f.id = c.callee_id WHERE c.caller_id = (SELECT id FROM functions WHERE name = 'fib') ORDER BY f.name"),
            ["deflate_slow|8|4|1", "fib|13|8|2"]
        );
        // The tree's self amounts add up to the total; the root's cumulative is its whole.
        assert_eq!(
            query("SELECT SUM(self_amount), SUM(self_samples) FROM nodes"),
            ["24|13"]
        );
        assert_eq!(
            query("SELECT f.name, n.cum_amount, n.cum_samples FROM nodes n JOIN functions f ON f.id = n.function_id WHERE n.parent_id IS NULL ORDER BY n.cum_amount DESC"),
            ["__libc_start_main|20|12", "std::rt::lang_start|4|1"]
        );
        assert_eq!(
            query("SELECT symbol FROM functions WHERE name = 'foo::bar()'"),
            ["_ZN3foo3barEv"]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
