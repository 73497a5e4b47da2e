//! What is wrong with an algorithm file, and where.

/// Where in a file a problem lies: the line, and the gpu, threadblock and step when the
/// problem is theirs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Place {
    pub line: Option<u32>,
    pub gpu: Option<usize>,
    pub tb: Option<usize>,
    pub step: Option<usize>,
}

impl Place {
    /// At `line`, nothing narrower.
    pub fn line(line: u32) -> Place {
        Place {
            line: Some(line),
            ..Place::default()
        }
    }

    /// At `line`, in gpu `gpu`.
    pub fn gpu(line: u32, gpu: usize) -> Place {
        Place {
            gpu: Some(gpu),
            ..Place::line(line)
        }
    }

    /// At `line`, in threadblock `tb` of gpu `gpu`.
    pub fn tb(line: u32, gpu: usize, tb: usize) -> Place {
        Place {
            tb: Some(tb),
            ..Place::gpu(line, gpu)
        }
    }

    /// At `line`, step `step` of threadblock `tb` of gpu `gpu`.
    pub fn step(line: u32, gpu: usize, tb: usize, step: usize) -> Place {
        Place {
            step: Some(step),
            ..Place::tb(line, gpu, tb)
        }
    }
}

/// An algorithm file that cannot be used: it does not parse, breaks a rule of the format,
/// or cannot be read. The message names the file, the line, and the gpu, threadblock and
/// step involved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct FileError {
    pub file: String,
    pub place: Place,
    pub reason: String,
}

impl FileError {
    pub fn new(file: &str, place: Place, reason: impl Into<String>) -> FileError {
        FileError {
            file: file.to_string(),
            place,
            reason: reason.into(),
        }
    }
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.place.line {
            write!(f, ":{line}")?;
        }
        let parts: Vec<String> = [
            ("gpu", self.place.gpu),
            ("tb", self.place.tb),
            ("step", self.place.step),
        ]
        .into_iter()
        .filter_map(|(what, v)| v.map(|v| format!("{what} {v}")))
        .collect();
        if !parts.is_empty() {
            write!(f, ": {}", parts.join(", "))?;
        }
        write!(f, ": {}", self.reason)
    }
}
