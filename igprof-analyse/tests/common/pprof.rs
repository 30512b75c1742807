//! The part of pprof's profile.proto (github.com/google/pprof, proto/profile.proto) that
//! the export tests read, decoded with prost.

#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}
#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

impl Profile {
    /// The string at `index` of the table.
    pub fn text(&self, index: i64) -> &str {
        &self.string_table[index as usize]
    }

    /// The sample types: (type, unit).
    pub fn types(&self) -> Vec<(&str, &str)> {
        self.sample_type
            .iter()
            .map(|t| (self.text(t.r#type), self.text(t.unit)))
            .collect()
    }

    /// The period's type and unit, and the period.
    pub fn period(&self) -> (&str, &str, i64) {
        let period_type = self.period_type.as_ref().unwrap();
        (
            self.text(period_type.r#type),
            self.text(period_type.unit),
            self.period,
        )
    }

    /// The sums of the samples' two values.
    pub fn sums(&self) -> (i64, i64) {
        let sum = |index: usize| -> i64 { self.sample.iter().map(|s| s.value[index]).sum() };
        (sum(0), sum(1))
    }
}
