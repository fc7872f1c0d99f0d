//! Graphs joined into one: [`GraphBuilder::append`] adds another graph's nodes to a graph,
//! its inputs read from tensors the graph already has, so that a program's consecutive
//! compute steps become one graph (one memory plan, one recording, the passes across what
//! were step boundaries). [`GraphBuilder::with_round_trip_casts_removed`] then drops the
//! casts those boundaries leave: a value cast from f16 to f32 and back reads the f16 one;
//! [`GraphBuilder::with_elementwise_kept_in_f16`] runs in f16 the elementwise ops that f32
//! staging left between such casts (a CPU kernel between two fp16 delegates).
//! [`GraphBuilder::with_integer_round_trips_removed`] and
//! [`GraphBuilder::with_zero_point_shifts_folded`] do the same for a fake-quantized model's
//! quantize and dequantize pairs: values already integers pass through int8 unchanged.

use crate::error::{Error, Result};
use crate::fusion::Uses;
use crate::graph::{BinaryOp, GraphBuilder, Node, Op, StorageKind, TensorId, TensorInfo, UnaryOp};
use crate::kernels::{Kernel, push};
use crate::ops::Math;
use crate::passes::retain;
use vk_core::DType;

impl GraphBuilder {
    /// Adds `other`'s tensors and nodes to this graph. `other`'s input `i` reads `bind[i]`
    /// where that is given (a tensor of this graph of the same dtype and element count),
    /// else becomes a new input of this graph; `other`'s outputs become outputs of this graph,
    /// after its own. Returns the tensors `other`'s inputs and outputs are here, in order.
    pub fn append(
        &mut self,
        other: &GraphBuilder,
        bind: &[Option<TensorId>],
    ) -> Result<(Vec<TensorId>, Vec<TensorId>)> {
        if bind.len() != other.inputs.len() {
            return Err(Error::Graph(format!(
                "{} bindings for a graph of {} inputs",
                bind.len(),
                other.inputs.len()
            )));
        }
        // Where each of `other`'s storages is here: a bound input's is its tensor's.
        let mut storage_at: Vec<Option<usize>> = vec![None; other.storages.len()];
        for (&input, bound) in other.inputs.iter().zip(bind) {
            let Some(b) = *bound else { continue };
            let (oi, bi) = (&other.tensors[input.0], self.info("append", b)?);
            if oi.dtype != bi.dtype || oi.numel() != bi.numel() {
                return Err(Error::Graph(format!(
                    "input '{}' {:?} {:?} bound to '{}' {:?} {:?}",
                    oi.name, oi.dtype, oi.shape, bi.name, bi.dtype, bi.shape
                )));
            }
            storage_at[oi.storage] = Some(bi.storage);
        }
        let base = self.tensors.len();
        for (s, st) in other.storages.iter().enumerate() {
            if storage_at[s].is_none() {
                let mut st = st.clone();
                st.tensor = TensorId(base + st.tensor.0);
                self.storages.push(st);
                storage_at[s] = Some(self.storages.len() - 1);
            }
        }
        for t in &other.tensors {
            self.tensors.push(TensorInfo {
                storage: storage_at[t.storage].unwrap_or_default(),
                ..t.clone()
            });
        }
        let at = |t: TensorId| TensorId(base + t.0);
        for n in &other.nodes {
            let mut op = n.op.clone();
            op.map_inputs(&at);
            self.nodes.push(Node { op, out: at(n.out) });
        }
        for (&input, bound) in other.inputs.iter().zip(bind) {
            if bound.is_none() {
                self.inputs.push(at(input));
            }
        }
        let outputs: Vec<TensorId> = other.outputs.iter().map(|&t| at(t)).collect();
        self.outputs.extend(&outputs);
        Ok((other.inputs.iter().map(|&t| at(t)).collect(), outputs))
    }

    /// The tensors of the graph's inputs, in order.
    pub fn input_tensors(&self) -> &[TensorId] {
        &self.inputs
    }

    /// The tensors of the graph's outputs, in order.
    pub fn output_tensors(&self) -> &[TensorId] {
        &self.outputs
    }

    /// Keeps output `i` where `keep[i]` (a missing entry keeps it); the others become
    /// intermediate values (and the copies that made some of them, dead nodes, which
    /// [`GraphBuilder::without_dead_nodes`] then drops).
    pub fn keep_outputs(&mut self, keep: &[bool]) {
        let kept: Vec<TensorId> = self
            .outputs
            .iter()
            .enumerate()
            .filter(|&(i, _)| keep.get(i).copied().unwrap_or(true))
            .map(|(_, &t)| t)
            .collect();
        for &t in &self.outputs {
            let st = self.tensors[t.0].storage;
            let still = kept.iter().any(|k| self.tensors[k.0].storage == st);
            if !still && matches!(self.storages[st].kind, StorageKind::Output) {
                self.storages[st].kind = StorageKind::Temp;
            }
        }
        self.outputs = kept;
    }

    /// The graph with each `f16 -> f32 -> f16` round trip of casts (lossless) gone: readers
    /// of the second cast read the first one's input. Only where the second cast alone writes
    /// a storage of its own that is no graph output, and the first cast's input is complete
    /// before it. `None` where there is none.
    pub(crate) fn with_round_trip_casts_removed(&self) -> Option<GraphBuilder> {
        self.with_casts_read_from(|uses, n| match n.op {
            Op::Cast {
                x: wide,
                to: DType::F16,
            } => self.widened_f16(uses, wide).map(|(_, narrow)| narrow),
            _ => None,
        })
    }

    /// The graph with each cast node for which `source` names a tensor holding its result
    /// already gone, every view of its result reading that tensor's storage instead. Only
    /// where the cast alone writes a storage of its own that is no graph output. `None` where
    /// there is none.
    fn with_casts_read_from(
        &self,
        source: impl Fn(&Uses, &Node) -> Option<TensorId>,
    ) -> Option<GraphBuilder> {
        let uses = Uses::of(self);
        let outputs: Vec<usize> = self
            .outputs
            .iter()
            .map(|t| self.tensors[t.0].storage)
            .collect();
        let mut g = self.clone();
        let mut drop = vec![false; self.nodes.len()];
        for (k, n) in self.nodes.iter().enumerate() {
            if !matches!(n.op, Op::Cast { .. }) {
                continue;
            }
            let Some(from) = source(&uses, n) else {
                continue;
            };
            let (st, from) = (self.tensors[n.out.0].storage, self.tensors[from.0].storage);
            let fits = uses.writers[st] == [k]
                && self.storages[st].tensor == n.out
                && matches!(self.storages[st].kind, StorageKind::Temp)
                && !outputs.contains(&st);
            if !fits {
                continue;
            }
            for t in &mut g.tensors {
                if t.storage == st {
                    t.storage = from;
                }
            }
            drop[k] = true;
        }
        retain(g, &drop)
    }
}

impl GraphBuilder {
    /// The graph with each round trip of an f32 value through an integer dtype gone where the
    /// value is already an integer in that dtype's range, so that the trip changes nothing:
    /// a quantize (`clamp(round(x / scale) + zero_point, qmin, qmax)` cast to int8) followed
    /// by a dequantize (cast back to f32, then scaled), as a fake-quantized model's every
    /// layer has. Readers of the cast back read the clamped value, and the elementwise
    /// chains on both sides become one. Only where the cast back alone writes a storage of
    /// its own that is no graph output, and the clamped value is written once. `None` where
    /// there is none.
    pub(crate) fn with_integer_round_trips_removed(&self) -> Option<GraphBuilder> {
        self.with_casts_read_from(|uses, n| {
            let Op::Cast {
                x: q,
                to: DType::F32,
            } = n.op
            else {
                return None;
            };
            let range = integer_range(self.tensors[q.0].dtype)?;
            let Some((_, &Op::Cast { x: v, .. })) = self.writer(uses, q) else {
                return None;
            };
            let fits = uses.writers[self.tensors[v.0].storage].len() == 1
                && self.tensors[v.0].dtype == DType::F32
                && self.tensors[v.0].numel() == self.tensors[n.out.0].numel()
                && self.clamped_integer(uses, v, range);
            fits.then_some(v)
        })
    }

    /// The graph with each `clamp(x + a, lo, hi) + b` of an integer-valued `x` and integers
    /// `a`, `b`, `lo` and `hi` (at most 2^16 in magnitude) computed as `clamp(x, lo + b, hi
    /// + b)` where `a + b` is 0: the zero point a quantize adds and the dequantize that
    /// follows takes away again. The same values (below 2^24 every sum is exact, and beyond
    /// it both sides give a bound), in two steps fewer, so that a fake-quantized layer's
    /// chain of quantizes, dequantizes and activation fits one dispatch. Only where the
    /// shifted and clamped values are read by nothing else. `None` where there is none.
    pub(crate) fn with_zero_point_shifts_folded(&self) -> Option<GraphBuilder> {
        const LIMIT: f32 = 65536.0;
        let uses = Uses::of(self);
        let small = |v: f32| v.fract() == 0.0 && v.abs() <= LIMIT;
        let mut g = self.clone();
        let mut changed = false;
        for (k, n) in self.nodes.iter().enumerate() {
            let Op::Unary {
                op: UnaryOp::AddScalar(b),
                x: c,
            } = n.op
            else {
                continue;
            };
            let Some((
                jc,
                &Op::Unary {
                    op: UnaryOp::Clamp(lo, hi),
                    x: t,
                },
            )) = self.sole_read(&uses, c)
            else {
                continue;
            };
            let Some((
                ja,
                &Op::Unary {
                    op: UnaryOp::AddScalar(a),
                    x,
                },
            )) = self.sole_read(&uses, t)
            else {
                continue;
            };
            let fits = a + b == 0.0
                && [a, b, lo, hi].into_iter().all(small)
                && jc < k
                && ja < jc
                && self.tensors[x.0].dtype == DType::F32
                && uses.writers[self.tensors[x.0].storage].len() == 1
                && self.integer_valued(&uses, x, 4);
            if !fits {
                continue;
            }
            g.nodes[k].op = Op::Unary {
                op: UnaryOp::Clamp(lo + b, hi + b),
                x,
            };
            changed = true;
        }
        changed.then(|| g.without_dead_nodes())
    }

    /// The node that wrote `t` and its op, where `t` is that node's whole result (or a view
    /// of it) in a storage that one node reads and that is no graph output.
    fn sole_read(&self, uses: &Uses, t: TensorId) -> Option<(usize, &Op)> {
        let st = self.tensors[t.0].storage;
        let temp = matches!(self.storages[st].kind, StorageKind::Temp);
        let found = self.writer(uses, t)?;
        (temp && uses.readers[st] == 1).then_some(found)
    }

    /// Whether `t` is `clamp(y, lo, hi)` of an integer-valued `y`, with integer bounds
    /// within `range`.
    fn clamped_integer(&self, uses: &Uses, t: TensorId, (min, max): (f32, f32)) -> bool {
        match self.writer(uses, t) {
            Some((
                _,
                &Op::Unary {
                    op: UnaryOp::Clamp(lo, hi),
                    x,
                },
            )) => {
                let bounds = lo.fract() == 0.0 && hi.fract() == 0.0 && lo >= min && hi <= max;
                bounds && self.integer_valued(uses, x, 4)
            }
            _ => false,
        }
    }

    /// Whether every element of `t` is an integer (or NaN): a rounding's result, an integer
    /// constant, or such values clamped to or shifted by integers, looking back `depth` nodes.
    fn integer_valued(&self, uses: &Uses, t: TensorId, depth: usize) -> bool {
        if let Some(v) = self.constant_values(t) {
            return v.iter().all(|x| x.fract() == 0.0);
        }
        let Some((_, op)) = self.writer(uses, t).filter(|_| depth > 0) else {
            return false;
        };
        let whole = |f: f32| f.fract() == 0.0;
        match *op {
            Op::Unary { op, x } => match op {
                UnaryOp::Clamp(lo, hi) => {
                    whole(lo) && whole(hi) && self.integer_valued(uses, x, depth - 1)
                }
                UnaryOp::AddScalar(s) => whole(s) && self.integer_valued(uses, x, depth - 1),
                _ => false,
            },
            Op::Binary {
                op: BinaryOp::Add | BinaryOp::Sub,
                a,
                b,
            } => self.integer_valued(uses, a, depth - 1) && self.integer_valued(uses, b, depth - 1),
            Op::Kernel {
                kernel: Kernel::UnaryMath,
                ref push,
                ..
            } => {
                let code = push.get(std::mem::offset_of!(push::UnaryMathPush, op) / 4);
                [Math::Round, Math::Floor, Math::Ceil]
                    .iter()
                    .any(|&m| code == Some(&(m as u32)))
            }
            Op::Cast { x, .. } => integer_range(self.tensors[x.0].dtype).is_some(),
            _ => false,
        }
    }

    /// The `f16 -> f32` cast whose whole result `t` is, as its node and its f16 input, where
    /// that cast alone writes `t`'s storage and its input is complete before it.
    fn widened_f16(&self, uses: &Uses, t: TensorId) -> Option<(usize, TensorId)> {
        let st = self.tensors[t.0].storage;
        let [j] = uses.writers[st][..] else {
            return None;
        };
        let Op::Cast {
            x: narrow,
            to: DType::F32,
        } = self.nodes[j].op
        else {
            return None;
        };
        let from = self.tensors[narrow.0].storage;
        let fits = self.tensors[narrow.0].dtype == DType::F16
            && self.storages[st].tensor == self.nodes[j].out
            && self.tensors[t.0].numel() == self.tensors[narrow.0].numel()
            && uses.writers[from].iter().all(|&w| w < j);
        fits.then_some((j, narrow))
    }

    /// The graph with each two-pass argmax or argmin (`arg_part.comp`) of an `f16 -> f32`
    /// cast's whole result reading the f16 values instead, in its f16 variant: the cast is
    /// exact and keeps order, ties and NaNs, so the indices are the same (a language model's
    /// greedy token, picked from logits its f16 graph widens for its output), where nothing
    /// else reads the cast's result, which goes. `None` where there is none.
    pub(crate) fn with_arg_extremes_of_f16(&self) -> Option<GraphBuilder> {
        let uses = Uses::of(self);
        let mut g = self.clone();
        let mut drop = vec![false; self.nodes.len()];
        for (k, n) in self.nodes.iter().enumerate() {
            let Op::Kernel {
                kernel: crate::kernels::Kernel::ArgPart,
                inputs,
                ..
            } = &n.op
            else {
                continue;
            };
            let st = self.tensors[inputs[0].0].storage;
            let Some((j, narrow)) = self.widened_f16(&uses, inputs[0]) else {
                continue;
            };
            if uses.readers[st] != 1 || drop[j] {
                continue;
            }
            if let Op::Kernel {
                inputs, precision, ..
            } = &mut g.nodes[k].op
            {
                inputs[0] = narrow;
                *precision = Some(DType::F16);
            }
            drop[j] = true;
        }
        retain(g, &drop)
    }

    /// The graph with each elementwise op computed in f32 between casts, `f16 -> f32 -> op ->
    /// f16`, computed in f16 instead: the op reads the f16 values and stores f16, and both
    /// casts go. The f16 kernels compute in f32 and round once as they store, so the results
    /// are those of the casts. Where every operand is a cast's whole result, the op's result
    /// is read only by the cast back, and neither is a graph output. `None` where there is
    /// none.
    pub(crate) fn with_elementwise_kept_in_f16(&self) -> Option<GraphBuilder> {
        let n_st = self.storages.len();
        let (mut writers, mut readers) = (vec![Vec::new(); n_st], vec![0usize; n_st]);
        for (k, n) in self.nodes.iter().enumerate() {
            writers[self.tensors[n.out.0].storage].push(k);
            for t in n.op.inputs() {
                readers[self.tensors[t.0].storage] += 1;
            }
        }
        for t in &self.outputs {
            readers[self.tensors[t.0].storage] += 1;
        }
        let st = |t: TensorId| self.tensors[t.0].storage;
        // The node that alone writes `t`'s storage, `t` its result or a view of it of the same
        // shape (a joined step's input reads its producer's output so).
        let sole = |t: TensorId| match writers[st(t)][..] {
            [j] if self.tensors[self.nodes[j].out.0].shape == self.tensors[t.0].shape
                && self.storages[st(t)].tensor == self.nodes[j].out =>
            {
                Some(j)
            }
            _ => None,
        };
        let mut g = self.clone();
        let mut drop = vec![false; self.nodes.len()];
        for (k, n) in self.nodes.iter().enumerate() {
            let operands = match n.op {
                Op::Unary { x, .. } => vec![x],
                Op::Binary { a, b, .. } => vec![a, b],
                _ => continue,
            };
            if self.tensors[n.out.0].dtype != DType::F32 || drop[k] {
                continue;
            }
            // Each operand's f16 source and the cast that widened it.
            let widened: Option<Vec<(TensorId, usize)>> = operands
                .iter()
                .map(|&t| {
                    let j = sole(t)?;
                    match self.nodes[j].op {
                        Op::Cast { x, to: DType::F32 }
                            if self.tensors[x.0].dtype == DType::F16
                                && writers[st(x)].iter().all(|&w| w < j) =>
                        {
                            Some((x, j))
                        }
                        _ => None,
                    }
                })
                .collect();
            let Some(widened) = widened else { continue };
            // The one reader of the result: a cast back to f16 of it, whole.
            let back = self.nodes.iter().enumerate().skip(k + 1).find(|(_, c)| {
                matches!(c.op, Op::Cast { x, to: DType::F16 }
                    if st(x) == st(n.out)
                        && self.tensors[x.0].shape == self.tensors[n.out.0].shape)
            });
            let Some((c, cast)) = back else { continue };
            let narrow = cast.out;
            let fits = readers[st(n.out)] == 1
                && sole(n.out) == Some(k)
                && sole(narrow) == Some(c)
                && matches!(self.storages[st(narrow)].kind, StorageKind::Temp)
                && readers[st(narrow)] > 0
                && !self.outputs.iter().any(|o| st(*o) == st(narrow));
            if !fits {
                continue;
            }
            let mut op = n.op.clone();
            let sources: Vec<(TensorId, TensorId)> = operands
                .iter()
                .zip(&widened)
                .map(|(&t, &(x, _))| (t, x))
                .collect();
            op.map_inputs(&|t| {
                sources
                    .iter()
                    .find(|(from, _)| *from == t)
                    .map_or(t, |&(_, to)| to)
            });
            g.nodes[k].op = op;
            g.tensors[n.out.0].dtype = DType::F16;
            for t in &mut g.tensors {
                if t.storage == st(narrow) {
                    t.storage = st(n.out);
                }
            }
            drop[c] = true;
            // A widening cast nothing else reads goes too.
            for &(_, j) in &widened {
                let at = st(self.nodes[j].out);
                let reads = operands.iter().filter(|&&o| st(o) == at).count();
                if readers[at] == reads {
                    drop[j] = true;
                }
            }
        }
        retain(g, &drop)
    }
}

/// The values an integer dtype holds, as f32 (exact at its ends for 8- and 16-bit dtypes;
/// 32-bit ones are limited to where f32 holds every integer).
fn integer_range(dtype: DType) -> Option<(f32, f32)> {
    match dtype {
        DType::I8 => Some((-128.0, 127.0)),
        DType::U8 => Some((0.0, 255.0)),
        DType::I16 => Some((-32768.0, 32767.0)),
        DType::I32 | DType::I64 => Some((-16_777_216.0, 16_777_216.0)),
        _ => None,
    }
}
