//! Reading an MSCCL-IR file into an [`Algorithm`], in either dialect in circulation.
//!
//! RCCL's files (`tools/msccl-algorithms`) and microsoft/msccl's differ in a few spellings:
//! the collective (`reduce_scatter` or `reducescatter`, `allgather` or `all_gather`), the
//! in-place flags (`inplace` alone, or `inplace` and `outofplace`), and the optional byte
//! range (`minBytes`, `maxBytes`). Both are read. Unknown attributes are ignored (later
//! versions of the format add some); unknown elements inside `<algo>`, `<gpu>` and `<tb>`
//! are an error, since a step the reader skipped would silently change the algorithm.

use super::error::{FileError, Place};
use super::model::{parse_coll, Algorithm, BufName, ChunkRef, Gpu, Step, StepKind, Threadblock};
use roxmltree::{Document, Node};

/// The algorithm in `text`, read from `file` (named in errors).
pub fn read(file: &str, text: &str) -> Result<Algorithm, FileError> {
    let doc = Document::parse(text).map_err(|e| {
        let pos = e.pos();
        FileError::new(file, Place::line(pos.row), format!("malformed XML: {e}"))
    })?;
    let newlines: Vec<usize> = text
        .bytes()
        .enumerate()
        .filter_map(|(i, b)| (b == b'\n').then_some(i))
        .collect();
    let reader = Reader {
        file,
        newlines: &newlines,
    };
    reader.algo(doc.root_element())
}

struct Reader<'a> {
    file: &'a str,
    /// Byte offsets of the text's newlines: a node's line by binary search
    /// (roxmltree's `text_pos_at` scans from the start, quadratic over a large file).
    newlines: &'a [usize],
}

impl Reader<'_> {
    fn line(&self, node: Node<'_, '_>) -> u32 {
        let before = self.newlines.partition_point(|&n| n < node.range().start);
        u32::try_from(before + 1).unwrap_or(u32::MAX)
    }

    fn error(&self, place: Place, reason: impl Into<String>) -> FileError {
        FileError::new(self.file, place, reason)
    }

    /// The children of `node` that are elements, each required to be `name`.
    fn children<'n, 'i>(
        &self,
        node: Node<'n, 'i>,
        name: &str,
        place: &Place,
    ) -> Result<Vec<Node<'n, 'i>>, FileError> {
        let mut out = Vec::new();
        for child in node.children().filter(Node::is_element) {
            let found = child.tag_name().name();
            if found != name {
                let place = Place {
                    line: Some(self.line(child)),
                    ..place.clone()
                };
                return Err(self.error(
                    place,
                    format!(
                        "malformed: unexpected element <{found}> inside <{}>; expected <{name}>",
                        node.tag_name().name()
                    ),
                ));
            }
            out.push(child);
        }
        Ok(out)
    }

    fn algo(&self, node: Node<'_, '_>) -> Result<Algorithm, FileError> {
        let line = self.line(node);
        let place = Place::line(line);
        if node.tag_name().name() != "algo" {
            return Err(self.error(
                place,
                format!(
                    "malformed: the root element is <{}>, expected <algo>",
                    node.tag_name().name()
                ),
            ));
        }
        let attr = Attrs {
            r: self,
            node,
            place: place.clone(),
        };
        let coll_name = attr.text("coll")?;
        let coll = parse_coll(&coll_name).ok_or_else(|| {
            self.error(
                place.clone(),
                format!(
                    "unknown collective coll=\"{coll_name}\"; known: allreduce, allgather, \
                     reducescatter (reduce_scatter), alltoall, broadcast, reduce, gather, scatter"
                ),
            )
        })?;
        let inplace = attr.flag("inplace", false)?;
        let outofplace = match node.attribute("outofplace") {
            Some(_) => attr.flag("outofplace", true)?,
            None => !inplace,
        };
        let max_bytes = attr.number_or("maxBytes", 0)?;
        let mut gpus = Vec::new();
        for g in self.children(node, "gpu", &place)? {
            gpus.push(self.gpu(g)?);
        }
        Ok(Algorithm {
            name: attr.text("name")?,
            coll,
            proto: node.attribute("proto").unwrap_or("Simple").to_string(),
            nchannels: attr.number_or("nchannels", 1)?,
            nchunksperloop: attr.number("nchunksperloop")?,
            ngpus: attr.number("ngpus")?,
            inplace,
            outofplace,
            min_bytes: attr.number_or("minBytes", 0)?,
            max_bytes: (max_bytes > 0).then_some(max_bytes),
            root: attr.number_or("root", 0)?,
            gpus,
            line,
        })
    }

    fn gpu(&self, node: Node<'_, '_>) -> Result<Gpu, FileError> {
        let line = self.line(node);
        let attr = Attrs {
            r: self,
            node,
            place: Place::line(line),
        };
        let id = attr.number("id")?;
        let place = Place::gpu(line, id);
        let attr = Attrs {
            place: place.clone(),
            ..attr
        };
        let mut tbs = Vec::new();
        for t in self.children(node, "tb", &place)? {
            tbs.push(self.tb(t, id)?);
        }
        Ok(Gpu {
            id,
            i_chunks: attr.number("i_chunks")?,
            o_chunks: attr.number("o_chunks")?,
            s_chunks: attr.number_or("s_chunks", 0)?,
            tbs,
            line,
        })
    }

    fn tb(&self, node: Node<'_, '_>, gpu: usize) -> Result<Threadblock, FileError> {
        let line = self.line(node);
        let attr = Attrs {
            r: self,
            node,
            place: Place::gpu(line, gpu),
        };
        let id = attr.number("id")?;
        let place = Place::tb(line, gpu, id);
        let attr = Attrs {
            place: place.clone(),
            ..attr
        };
        let mut steps = Vec::new();
        for s in self.children(node, "step", &place)? {
            steps.push(self.step(s, gpu, id)?);
        }
        Ok(Threadblock {
            id,
            send: attr.peer("send")?,
            recv: attr.peer("recv")?,
            chan: attr.number_or("chan", 0)?,
            steps,
            line,
        })
    }

    fn step(&self, node: Node<'_, '_>, gpu: usize, tb: usize) -> Result<Step, FileError> {
        let line = self.line(node);
        let attr = Attrs {
            r: self,
            node,
            place: Place::tb(line, gpu, tb),
        };
        let s = attr.number("s")?;
        let place = Place::step(line, gpu, tb, s);
        let attr = Attrs {
            place: place.clone(),
            ..attr
        };
        let type_name = attr.text("type")?;
        let kind = StepKind::parse(&type_name).ok_or_else(|| {
            self.error(
                place.clone(),
                format!(
                    "unknown step type `{type_name}`; the types are s, r, rcs, rrs, rrc, \
                     rrcs, cpy, re and nop"
                ),
            )
        })?;
        let depid = attr.peer("depid")?;
        let deps = attr.peer("deps")?;
        let dep = match (depid, deps) {
            (Some(t), Some(s)) => Some((t, s)),
            (None, None) => None,
            _ => {
                return Err(self.error(place, "depid and deps must both name a step or both be -1"))
            }
        };
        Ok(Step {
            s,
            kind,
            src: attr.chunk("srcbuf", "srcoff")?,
            dst: attr.chunk("dstbuf", "dstoff")?,
            cnt: attr.number_or("cnt", 1)?,
            dep,
            hasdep: attr.flag("hasdep", false)?,
            line,
        })
    }
}

/// The attributes of one element, read with errors that say where.
struct Attrs<'r, 'a, 'n, 'i> {
    r: &'r Reader<'a>,
    node: Node<'n, 'i>,
    place: Place,
}

impl Attrs<'_, '_, '_, '_> {
    fn error(&self, reason: String) -> FileError {
        self.r.error(self.place.clone(), reason)
    }

    fn element(&self) -> &str {
        self.node.tag_name().name()
    }

    fn text(&self, name: &str) -> Result<String, FileError> {
        self.node
            .attribute(name)
            .map(str::to_string)
            .ok_or_else(|| {
                self.error(format!(
                    "malformed: <{}> has no `{name}` attribute",
                    self.element()
                ))
            })
    }

    fn number(&self, name: &str) -> Result<usize, FileError> {
        let text = self.text(name)?;
        text.trim().parse::<usize>().map_err(|_| {
            self.error(format!(
                "malformed: {name}=\"{text}\" on <{}> is not a non-negative integer",
                self.element()
            ))
        })
    }

    fn number_or(&self, name: &str, default: usize) -> Result<usize, FileError> {
        match self.node.attribute(name) {
            Some(_) => self.number(name),
            None => Ok(default),
        }
    }

    /// A rank, threadblock or step that may be `-1` (none); absent is none too.
    fn peer(&self, name: &str) -> Result<Option<usize>, FileError> {
        match self.node.attribute(name).map(str::trim) {
            None | Some("-1") => Ok(None),
            Some(_) => self.number(name).map(Some),
        }
    }

    fn flag(&self, name: &str, default: bool) -> Result<bool, FileError> {
        match self.node.attribute(name).map(str::trim) {
            None => Ok(default),
            Some("1") | Some("true") => Ok(true),
            Some("0") | Some("false") => Ok(false),
            Some(other) => Err(self.error(format!(
                "malformed: {name}=\"{other}\" on <{}> is not 0 or 1",
                self.element()
            ))),
        }
    }

    /// A buffer and offset pair; absent (or `-1`) reads as input chunk 0, for the step
    /// types that do not use it.
    fn chunk(&self, buf: &str, off: &str) -> Result<ChunkRef, FileError> {
        let name = match self.node.attribute(buf).map(str::trim) {
            None | Some("-1") => BufName::Input,
            Some("i") | Some("input") => BufName::Input,
            Some("o") | Some("output") => BufName::Output,
            Some("s") | Some("scratch") => BufName::Scratch,
            Some(other) => {
                return Err(self.error(format!(
                    "malformed: {buf}=\"{other}\" is not a buffer (i, o or s)"
                )))
            }
        };
        Ok(ChunkRef {
            buf: name,
            off: self.peer(off)?.unwrap_or(0),
        })
    }
}
