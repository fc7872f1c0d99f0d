//! conv2d: depthwise kernel, pointwise and tiled implicit GEMM.

use super::*;

impl Lowerer<'_> {
    /// Lowers a node of this family.
    pub(super) fn conv(&mut self, op: &Op, t: &Target) -> Result<()> {
        let (out, o, act, oi, n) = (t.out, t.o, t.act, &t.info, t.info.numel());
        match op {
            Op::Conv { x, w, bias, p } => {
                let (xi, wi) = (self.t(*x).clone(), self.t(*w).clone());
                let (nb, cin, h, wd) = (xi.shape[0], xi.shape[1], xi.shape[2], xi.shape[3]);
                let (cout, cin_g, kh, kw) = (wi.shape[0], wi.shape[1], wi.shape[2], wi.shape[3]);
                let (oh, ow) = (oi.shape[2], oi.shape[3]);
                let b = bias.map(|b| self.st(b));
                let has_bias = usize::from(b.is_some());
                let bindings = vec![
                    (xi.storage, false),
                    (wi.storage, false),
                    (b.unwrap_or(xi.storage), false),
                    (o, true),
                ];
                if p.groups == cin && p.groups > 1 {
                    let g = self.linear_groups(n as u64);
                    let push = [
                        n,
                        cin,
                        h,
                        wd,
                        cout,
                        oh,
                        ow,
                        kh,
                        kw,
                        p.stride[0],
                        p.stride[1],
                        p.padding[0],
                        p.padding[1],
                        p.dilation[0],
                        p.dilation[1],
                        has_bias,
                    ];
                    let (lo, hi) = act.unwrap_or((0.0, 0.0));
                    let mut push: Vec<u32> = push.iter().map(|&v| v as u32).collect();
                    push.extend([lo.to_bits(), hi.to_bits()]);
                    self.push(
                        Kernel::ConvDw,
                        vec![u32::from(act.is_some())],
                        bindings,
                        push,
                        [g, 1, 1],
                    );
                } else {
                    let pointwise = kh == 1 && kw == 1 && p.stride == [1, 1] && p.padding == [0, 0];
                    let m = cout / p.groups;
                    let nn = nb * oh * ow;
                    let k = cin_g * kh * kw;
                    // Gemm bindings: A = weights, B = input, bias, C.
                    let gb = vec![bindings[1], bindings[0], bindings[2], bindings[3]];
                    let with_bias = b.is_some();
                    if self.coop_conv(&xi, &wi.shape, p, (oh, ow), &gb, with_bias, out, act)? {
                        return Ok(());
                    }
                    let params = [
                        m,
                        nn,
                        k,
                        m * k,
                        k,
                        1,
                        0,
                        0,
                        0,
                        0,
                        0,
                        has_bias,
                        cin_g,
                        h,
                        wd,
                        oh,
                        ow,
                        kh,
                        kw,
                        p.stride[0],
                        p.stride[1],
                        p.padding[0],
                        p.padding[1],
                        p.dilation[0],
                        p.dilation[1],
                        cout,
                    ];
                    self.gemm(
                        m,
                        nn,
                        k,
                        p.groups,
                        if pointwise { 2 } else { 1 },
                        params,
                        gb,
                        out,
                        act,
                    )?;
                }
            }
            _ => return Err(self.not_in_family()),
        }
        Ok(())
    }
}
