//! Error pages: a virtual server's own pages for the errors the proxy answers itself
//! (`[[virtual_server.error_page]]`), read and checked when the config is loaded.

use toml::Spanned;

use crate::adc::action::media_type;
use crate::config::{invalid, ConfigError};
use crate::file::{ErrorPageSection, Origin};
use crate::wanopt::{file_error, read_limited, resolve};

/// Largest error page.
pub const MAX_ERROR_PAGE: u64 = 64 * 1024;

/// A page sent instead of the proxy's own text for some statuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorPage {
    /// The statuses it is for (400–599; no status in two pages of one virtual server).
    pub statuses: Vec<u16>,
    /// The page.
    pub body: String,
    /// Its `Content-Type`.
    pub content_type: String,
}

impl ErrorPage {
    /// The page of `pages` for `status`, if any.
    pub fn find(pages: &[ErrorPage], status: u16) -> Option<&ErrorPage> {
        pages.iter().find(|p| p.statuses.contains(&status))
    }
}

/// Checks a virtual server's error pages (`vs` names it in messages) and reads their files.
pub(crate) fn error_pages(
    sections: &[ErrorPageSection],
    vs: &str,
    origin: &Origin,
) -> Result<Vec<ErrorPage>, ConfigError> {
    let mut pages: Vec<ErrorPage> = Vec::with_capacity(sections.len());
    for s in sections {
        let what = format!("virtual server `{vs}`: error_page");
        let statuses = crate::adc::statuses(&s.status, 400..=599, &what, origin)?;
        let taken = |st: &&Spanned<u16>| ErrorPage::find(&pages, *st.get_ref()).is_some();
        if let Some(st) = s.status.get_ref().iter().find(taken) {
            return Err(invalid(
                origin.locate(Some(st.span())),
                format!(
                    "{what}: status {} has two error pages: keep one",
                    st.get_ref()
                ),
            ));
        }
        let path = resolve(s.file.get_ref(), origin);
        let body = read_limited(&path, MAX_ERROR_PAGE).map_err(|why| {
            file_error(
                &s.file,
                "an error page",
                &path,
                &why,
                "give a UTF-8 text file of at most 64 KiB (relative paths start at the config \
                 file)",
                origin,
            )
        })?;
        let content_type = media_type(&s.content_type, "text/html; charset=utf-8", &what, origin)?;
        pages.push(ErrorPage {
            statuses,
            body,
            content_type,
        });
    }
    Ok(pages)
}
