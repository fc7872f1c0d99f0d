//! GEMMs on cooperative matrices (`gemm_coop.comp`): fp16 matmul, bmm and linear on devices
//! where [`crate::coop::usable`] allows them.

use super::*;

impl Lowerer<'_> {
    /// Lowers a GEMM (the `params` and `bindings` of [`Lowerer::gemm`]'s MODE 0) to the
    /// cooperative kernel, or returns `false` when it does not apply: no cooperative
    /// configuration, not fp16, or A not contiguous along K, or B contiguous along neither
    /// dimension.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn coop_gemm(
        &mut self,
        m: usize,
        n: usize,
        k: usize,
        batch: usize,
        params: &[usize; 26],
        bindings: &[(usize, bool)],
        out: TensorId,
        act: Option<(f32, f32)>,
    ) -> Result<bool> {
        let Some(c) = self.coop else {
            return Ok(false);
        };
        if self.t(out).dtype != DType::F16 {
            return Ok(false);
        }
        let [
            _,
            _,
            _,
            sa_b,
            sa_m,
            sa_k,
            sb_b,
            sb_k,
            sb_n,
            sc_b,
            sc_m,
            has_bias,
        ] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11].map(|i| params[i]);
        // B row-major (N contiguous) or the transpose of a row-major [N][K] (K contiguous).
        let (b_t, sb_row) = match (sb_n, sb_k) {
            (1, s) => (false, s),
            (s, 1) => (true, s),
            _ => return Ok(false),
        };
        if sa_k != 1 || k == 0 {
            return Ok(false);
        }
        let vec = [sa_m, sa_b, sb_row, sb_b].iter().all(|s| s % 8 == 0);
        let act_flag = u32::from(act.is_some());
        let (kernel, spec, bm, bn) = match c {
            CoopConfig::Khr {
                tm,
                tn,
                tk,
                threads,
            } => (
                Kernel::GemmCoop,
                vec![
                    threads,
                    tm,
                    tn,
                    tk,
                    u32::from(b_t),
                    u32::from(vec),
                    act_flag,
                ],
                128,
                128,
            ),
            CoopConfig::Nv2 {
                bm,
                bn,
                bk,
                threads,
            } => (
                Kernel::GemmCoop2,
                vec![threads, bm, bn, bk, u32::from(b_t), act_flag],
                u64::from(bm),
                u64::from(bn),
            ),
        };
        let groups = self.check_groups([
            (n as u64).div_ceil(bn),
            (m as u64).div_ceil(bm),
            batch as u64,
        ])?;
        let (lo, hi) = act.unwrap_or((0.0, 0.0));
        let push = vec![
            m as u32,
            n as u32,
            k as u32,
            sa_b as u32,
            sa_m as u32,
            sb_b as u32,
            sb_row as u32,
            sc_b as u32,
            sc_m as u32,
            has_bias as u32,
            lo.to_bits(),
            hi.to_bits(),
        ];
        self.push(kernel, spec, bindings.to_vec(), push, groups);
        Ok(true)
    }
}
